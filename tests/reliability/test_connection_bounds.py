"""Connection-level bounds against a real gateway process (gateway/connection.py): header bytes
and a header deadline, a body rate, a connection cap, each enforced while the bytes arrive.

Short deadlines and a small cap so each attack ends within a test; /health must answer
throughout, and the gateway's memory must not follow what an attacker sends.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from bench.hostile_connections import closed_by_peer
from tests.reliability.conftest import chat_body, gateway_env
from tests.support.procs import Proc, start_gateway

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
MAX_CONNECTIONS = 48
# What a test waits at most for the gateway to act on a deadline of about one second.
GIVE_UP_S = 15.0


@pytest.fixture(scope="module")
def gateway(sim: Proc) -> Iterator[Proc]:
    env = gateway_env(
        FLASHBOX_SECURITY__HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
        FLASHBOX_SECURITY__BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        FLASHBOX_SECURITY__MAX_CONNECTIONS=str(MAX_CONNECTIONS),
    )
    proc = start_gateway([sim.url], env=env)
    try:
        yield proc
    finally:
        proc.stop()


def rss_kib(proc: Proc) -> int:
    for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def connect(proc: Proc) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proc.port), timeout=GIVE_UP_S)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one response with a content-length; (0, {}, b"") when the
    gateway closed without answering."""
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return 0, {}, b""
            data += chunk
    if b"\r\n\r\n" not in data:
        return 0, {}, b""
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    with contextlib.suppress(OSError):
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    return int(lines[0].split(" ")[1]), headers, body


def openai_error(body: bytes) -> str:
    error = orjson.loads(body)["error"]
    assert error["message"], body
    return str(error["code"])


class Health:
    """GET /health on fresh connections every 0.1 s while an attack runs in the test body."""

    def __init__(self, proc: Proc) -> None:
        self.proc = proc
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.statuses.append(httpx.get(self.proc.url + "/health", timeout=5).status_code)
            except httpx.HTTPError:
                self.statuses.append(0)
            self._stop.wait(0.1)

    def __enter__(self) -> Health:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        assert self.statuses, "no /health probe ran"
        assert set(self.statuses) == {200}, self.statuses


def trickle(sock: socket.socket, drip: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `drip` every 100 ms until the gateway answers or closes; then its answer."""
    sock.settimeout(0.1)
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        try:
            if sock.recv(1, socket.MSG_PEEK) == b"":
                return 0, {}, b""
            sock.settimeout(5)
            return read_response(sock)
        except TimeoutError:
            pass
        try:
            sock.sendall(drip)
        except OSError:
            break
    raise AssertionError(f"the gateway neither answered nor closed within {GIVE_UP_S} s")


def test_slow_headers_are_cut_at_the_deadline(gateway: Proc) -> None:
    with Health(gateway), connect(gateway) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-slow: ")
        status, headers, body = trickle(sock, b"a")
    assert status == 408
    assert headers["connection"] == "close"
    assert openai_error(body) == "request_timeout"


def test_slow_headers_on_the_anthropic_face_get_its_envelope(gateway: Proc) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-slow: ")
        status, _, body = trickle(sock, b"a")
    assert status == 408
    envelope = orjson.loads(body)
    assert envelope["type"] == "error"
    assert envelope["error"]["message"]


def test_a_silent_new_connection_is_closed_without_an_answer(gateway: Proc) -> None:
    with connect(gateway) as sock:
        assert closed_by_peer(sock, GIVE_UP_S)


def stream_header_lines(proc: Proc, total: int) -> int:
    """Header lines up to `total` bytes, never the blank line ending the block; the status
    the gateway answered (0: it closed without one)."""
    line = b"x-filler: " + b"a" * 1012 + b"\r\n"
    block = line * 64
    with connect(proc) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        sent = 0
        with contextlib.suppress(OSError):
            while sent < total:
                sock.sendall(block)
                sent += len(block)
        sock.settimeout(5)
        status, _, body = read_response(sock)
        if status:
            assert openai_error(body) == "headers_too_large"
        return status


def peak_rss_while(proc: Proc, work: Callable[[], None]) -> int:
    """The gateway's largest RSS (KiB) sampled every 10 ms while `work` runs."""
    peak = rss_kib(proc)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_kib(proc))
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        work()
    finally:
        done.set()
        sampler.join()
    return max(peak, rss_kib(proc))


def test_unending_header_blocks_are_cut_and_memory_stays_flat(gateway: Proc) -> None:
    # Four connections at once, each streaming 64 MB of header lines that never end.
    statuses: list[int] = []

    def attack() -> None:
        def one() -> None:
            statuses.append(stream_header_lines(gateway, 64 << 20))

        threads = [threading.Thread(target=one) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    httpx.get(gateway.url + "/health", timeout=5)
    before = rss_kib(gateway)
    with Health(gateway):
        peak = peak_rss_while(gateway, attack)
    assert (peak - before) < 16 * 1024, f"RSS grew {(peak - before) / 1024:.1f} MB"
    # Answered 431 where the client could still read it, else closed.
    assert len(statuses) == 4
    assert set(statuses) <= {431, 0}, statuses
    assert 431 in statuses, statuses


def test_a_large_but_finished_header_block_gets_431_in_time(gateway: Proc) -> None:
    """The common case of the bound: a client sends a 200 KB header and reads the answer."""
    response = httpx.post(
        gateway.url + "/v1/chat/completions", json=chat_body(), headers={"x-big": "a" * 200_000}
    )
    assert response.status_code == 431
    assert response.json()["error"]["code"] == "headers_too_large"


def slow_body_request(path: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        "content-length: 100000\r\n\r\n"
    ).encode() + b'{"model": '


def test_a_trickling_body_is_cut_with_408(gateway: Proc) -> None:
    with Health(gateway), connect(gateway) as sock:
        sock.sendall(slow_body_request("/v1/chat/completions"))
        status, _, body = trickle(sock, b" ")
    assert status == 408
    assert openai_error(body) == "request_timeout"


def test_a_body_sent_in_pieces_at_a_fair_pace_is_served(gateway: Proc) -> None:
    # 200 KB in four pieces with pauses: slower than body_timeout_s in all, but each piece
    # earns its time (body_min_bytes_per_s), as a big upload on a slow link would.
    body = orjson.dumps(chat_body("x" * 200_000))
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    quarter = len(body) // 4 + 1
    with connect(gateway) as sock:
        sock.sendall(head)
        for start in range(0, len(body), quarter):
            sock.sendall(body[start : start + quarter])
            time.sleep(BODY_TIMEOUT_S * 0.6)
        status, _, answer = read_response(sock)
    assert status == 200, answer[:300]
    assert orjson.loads(answer)["object"] == "chat.completion"


def test_keep_alive_pauses_are_not_header_deadlines(gateway: Proc) -> None:
    # Between requests the idle keep-alive timeout applies, not the header deadline.
    request = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
    with connect(gateway) as sock:
        sock.sendall(request)
        assert read_response(sock)[0] == 200
        time.sleep(HEADER_TIMEOUT_S * 2)
        sock.sendall(request)
        assert read_response(sock)[0] == 200


def test_connections_past_the_cap_are_refused_and_health_still_answers(gateway: Proc) -> None:
    extra = 10
    with httpx.Client(timeout=5) as kept:
        assert kept.get(gateway.url + "/health").status_code == 200
        socks = [connect(gateway) for _ in range(MAX_CONNECTIONS + extra)]
        try:
            # Health still answers on a connection opened before the cap was reached.
            assert kept.get(gateway.url + "/health").status_code == 200
            refused = 0
            for sock in socks:
                # A refused one is answered at once; an accepted one is closed, silent, at
                # its header deadline.
                status, headers, body = read_response(sock)
                if status == 503:
                    refused += 1
                    assert headers["retry-after"]
                    assert openai_error(body) == "too_many_connections"
                else:
                    assert status == 0
            # The kept connection and MAX_CONNECTIONS - 1 of the new ones fit (one that an
            # earlier probe left closing may still count).
            assert extra + 1 <= refused <= extra + 2, refused
        finally:
            for sock in socks:
                sock.close()
    # Once they are gone, new connections are served again.
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(gateway.url + "/health", timeout=5).status_code == 200:
                return
        time.sleep(0.1)
    raise AssertionError("new connections still refused after the idle ones closed")
