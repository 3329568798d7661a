"""Hostile connections against a real gateway: what they cost it and whether it still answers.

One simulator, one gateway on loopback. Four attacks, each measured by the gateway's RSS
(/proc/PID/status) and by GET /health on a fresh connection while the attack runs:

- unfinished headers: `--streams` connections each send header lines up to `--header-mb` MB
  and never end the block;
- slow headers: `--slow` connections each send one header byte per 100 ms;
- slow bodies: `--slow` POSTs announce a 1 MB body and send 10 bytes per 100 ms;
- idle connections: `--idle` connections opened and left silent, against a gateway whose
  `security.max_connections` is `--cap`.

The deadlines are shortened (`--header-timeout`, `--body-timeout`) so a run takes a minute;
what the defaults do is the same at a longer scale.

    python -m bench hostile_connections [--header-mb 64] [--streams 4] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

from bench.procs import Proc, start_gateway, start_sim

MODEL = "glm-5.3-flash"
T = TypeVar("T")
# A header line of 1 KiB: many lines, as the attack sent them (one endless line is
# held by the parser the same way).
HEADER_LINE = b"x-filler: " + b"a" * 1012 + b"\r\n"


def rss_kib(proc: Proc, field_name: str = "VmRSS") -> int:
    for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field_name} for pid {proc.popen.pid}")


@dataclass
class Sampler:
    """The gateway's largest RSS while an attack runs (VmHWM is since start, so sample)."""

    proc: Proc
    peak_kib: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                self.peak_kib = max(self.peak_kib, rss_kib(self.proc))
            self._stop.wait(0.02)

    @contextlib.contextmanager
    def running(self) -> Iterator[Sampler]:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


def health_s(proc: Proc, timeout: float = 5.0) -> float | None:
    """Seconds GET /health took on a fresh connection; None when it did not answer 200."""
    start = time.perf_counter()
    try:
        ok = httpx.get(proc.url + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return None
    return time.perf_counter() - start if ok else None


def read_status(sock: socket.socket, timeout: float) -> int:
    """The status code of what the gateway answered before closing; 0 for a bare close."""
    sock.settimeout(timeout)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    parts = data.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


@dataclass
class StreamResult:
    sent_bytes: int
    cut: bool
    status: int


def stream_headers(proc: Proc, total: int, hold_s: float) -> StreamResult:
    """Header lines up to `total` bytes, never the blank line that ends the block; then hold
    the connection `hold_s` (the gateway keeps what it has read meanwhile)."""
    sock = socket.create_connection(("127.0.0.1", proc.port))
    sent, cut = 0, False
    block = HEADER_LINE * 64
    try:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        while sent < total:
            try:
                sock.sendall(block)
            except OSError:
                cut = True
                break
            sent += len(block)
        status = read_status(sock, hold_s)
        cut = cut or status != 0 or closed_by_peer(sock, 0.01)
        return StreamResult(sent, cut, status)
    finally:
        sock.close()


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Whether the gateway closed `sock` (waiting up to `timeout` for it to say so)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


@dataclass
class TrickleResult:
    seconds: float
    cut: bool
    status: int


def trickle(proc: Proc, head: bytes, drip: bytes, give_up_s: float) -> TrickleResult:
    """Send `head` at once, then `drip` every 100 ms until the gateway answers or closes."""
    sock = socket.create_connection(("127.0.0.1", proc.port))
    start = time.perf_counter()
    try:
        sock.sendall(head)
        sock.settimeout(0.1)
        while time.perf_counter() - start < give_up_s:
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                chunk = None
            except OSError:
                return TrickleResult(time.perf_counter() - start, True, 0)
            if chunk is not None:
                parts = chunk.split(b" ", 2)
                status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
                return TrickleResult(time.perf_counter() - start, True, status)
            try:
                sock.sendall(drip)
            except OSError:
                return TrickleResult(time.perf_counter() - start, True, 0)
        return TrickleResult(time.perf_counter() - start, False, 0)
    finally:
        sock.close()


def slow_header_head() -> tuple[bytes, bytes]:
    return b"GET /health HTTP/1.1\r\nhost: x\r\nx-slow: ", b"a"


def slow_body_head() -> tuple[bytes, bytes]:
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: 1000000\r\n\r\n"
    )
    return head, b" " * 10


def parallel(count: int, work: Callable[[], T]) -> list[T]:
    results: list[T] = []
    lock = threading.Lock()

    def one() -> None:
        result = work()
        with lock:
            results.append(result)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@dataclass
class HealthProbe:
    """GET /health on a fresh connection every 0.5 s while an attack runs."""

    proc: Proc
    seconds: list[float | None] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seconds.append(health_s(self.proc))
            self._stop.wait(0.5)

    @contextlib.contextmanager
    def running(self) -> Iterator[HealthProbe]:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()

    def figures(self) -> dict[str, object]:
        answered = [s for s in self.seconds if s is not None]
        return {
            "health_answered": f"{len(answered)}/{len(self.seconds)}",
            "health_worst_s": max(answered, default=None),
        }


def attack_headers(proc: Proc, streams: int, header_mb: int) -> dict[str, object]:
    before = rss_kib(proc)
    with Sampler(proc).running() as sampler, HealthProbe(proc).running() as health:
        results: list[StreamResult] = parallel(
            streams, lambda: stream_headers(proc, header_mb << 20, hold_s=2.0)
        )
    time.sleep(0.5)
    return {
        "streams": streams,
        "cut": sum(r.cut for r in results),
        "statuses": sorted({r.status for r in results}),
        "rss_before_mib": before / 1024,
        "rss_peak_mib": sampler.peak_kib / 1024,
        "rss_after_mib": rss_kib(proc) / 1024,
        "growth_mib": (sampler.peak_kib - before) / 1024,
        **health.figures(),
    }


def attack_trickle(
    proc: Proc, count: int, head: bytes, drip: bytes, give_up_s: float
) -> dict[str, object]:
    before = rss_kib(proc)
    with HealthProbe(proc).running() as health:
        results: list[TrickleResult] = parallel(count, lambda: trickle(proc, head, drip, give_up_s))
    return {
        "connections": count,
        "cut": sum(r.cut for r in results),
        "cut_after_s": max((r.seconds for r in results if r.cut), default=None),
        "statuses": sorted({r.status for r in results}),
        "rss_growth_mib": (rss_kib(proc) - before) / 1024,
        **health.figures(),
    }


def answers(socks: list[socket.socket], wait_s: float) -> tuple[int, int]:
    """(answered 503, closed without a word) among `socks`, read until none has anything
    more for `wait_s`."""
    refused = closed = 0
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        while ready := selector.select(wait_s):
            for key, _ in ready:
                ready_sock = key.fileobj
                assert isinstance(ready_sock, socket.socket)
                selector.unregister(ready_sock)
                try:
                    data = ready_sock.recv(64)
                except OSError:
                    data = b""
                if data.startswith(b"HTTP/1.1 503"):
                    refused += 1
                elif not data:
                    closed += 1
    return refused, closed


def attack_idle(proc: Proc, count: int, header_timeout_s: float) -> dict[str, object]:
    before = rss_kib(proc)
    keeper = httpx.Client(timeout=5)
    assert keeper.get(proc.url + "/health").status_code == 200
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection(("127.0.0.1", proc.port), timeout=5))
        refused, _ = answers(socks, 0.3)
        during = rss_kib(proc)
        kept = keeper.get(proc.url + "/health").status_code == 200
        try:
            fresh: int | str = httpx.get(proc.url + "/health", timeout=5).status_code
        except httpx.HTTPError as exc:
            fresh = type(exc).__name__
        # Silent connections are let go at the header deadline.
        time.sleep(header_timeout_s + 0.5)
        _, closed = answers(socks, 0.3)
    finally:
        for sock in socks:
            sock.close()
        keeper.close()
    time.sleep(0.5)
    return {
        "opened": count,
        "refused_503": refused,
        "closed_at_header_deadline": closed,
        "rss_growth_mib": (during - before) / 1024,
        "health_on_open_connection": kept,
        "health_fresh_at_cap": fresh,
        "health_after_s": health_s(proc),
    }


def gateway_env(args: argparse.Namespace) -> dict[str, str]:
    return {
        "FLASHBOX_API_KEYS": "",
        "FLASHBOX_SECURITY__HEADER_TIMEOUT_S": str(args.header_timeout),
        "FLASHBOX_SECURITY__BODY_TIMEOUT_S": str(args.body_timeout),
        "FLASHBOX_SECURITY__MAX_CONNECTIONS": str(args.cap),
    }


def run(args: argparse.Namespace, env: dict[str, str] | None = None) -> dict[str, object]:
    env = gateway_env(args) if env is None else env
    sim = start_sim()
    try:
        gateway = start_gateway([sim.url], env=env)
        try:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30)
            give_up = max(args.header_timeout, args.body_timeout) * 3 + 5
            results = {
                "settings": {k: v for k, v in env.items() if "SECURITY" in k},
                "unfinished_headers": attack_headers(gateway, args.streams, args.header_mb),
                "slow_headers": attack_trickle(gateway, args.slow, *slow_header_head(), give_up),
                "slow_bodies": attack_trickle(gateway, args.slow, *slow_body_head(), give_up),
                "idle_connections": attack_idle(gateway, args.idle, args.header_timeout),
                "alive": gateway.alive(),
            }
        finally:
            gateway.stop()
    finally:
        sim.stop()
    return results


def markdown(results: dict[str, object]) -> str:
    lines = ["## Hostile connections", "", f"settings: `{results['settings']}`", ""]
    for name in ("unfinished_headers", "slow_headers", "slow_bodies", "idle_connections"):
        figures = results[name]
        assert isinstance(figures, dict)
        text = ", ".join(
            f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
        )
        lines.append(f"- **{name.replace('_', ' ')}**: {text}")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench hostile_connections")
    p.add_argument("--header-mb", type=int, default=64, help="header bytes per stream, MiB")
    p.add_argument("--streams", type=int, default=4, help="unfinished-header connections")
    p.add_argument("--slow", type=int, default=20, help="slow-header and slow-body connections")
    p.add_argument("--idle", type=int, default=600, help="idle connections opened")
    p.add_argument("--cap", type=int, default=500, help="security.max_connections")
    p.add_argument("--header-timeout", type=float, default=2.0)
    p.add_argument("--body-timeout", type=float, default=2.0)
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    results = run(args)
    print(json.dumps(results, indent=2, default=str) if args.json else markdown(results))
    return 0 if results["alive"] else 1


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    results = run(parser().parse_args([]))
    (out_dir / "hostile_connections.json").write_text(json.dumps(results, indent=2, default=str))
    return markdown(results)
