"""Abort stops generation, frees the running slot and is counted in /metrics."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.engine.sim.helpers import metric, sse_events
from tests.support.procs import Proc, start_sim

ABORTS = "sglang:num_aborted_requests_total"
LONG = {"max_new_tokens": 1_000_000, "ignore_eos": True}


@pytest.fixture(scope="module")
def one_slot() -> Iterator[Proc]:
    # One running slot: an un-freed slot would block the next request forever.
    proc = start_sim("--max-running-requests", "1", name="one-slot", time_scale=0.01)
    try:
        yield proc
    finally:
        proc.stop()


def _wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def _running(url: str) -> int:
    return int(httpx.get(url + "/server_info").json()["num_running_reqs"])


def test_abort_request_ends_stream_with_abort_and_frees_slot(one_slot: Proc) -> None:
    before = metric(one_slot.url, ABORTS)
    result: dict[str, str] = {}

    def consume() -> None:
        body = {"text": "x", "rid": "abort-me", "stream": True, "sampling_params": LONG}
        result["body"] = httpx.post(one_slot.url + "/generate", json=body, timeout=30).text

    thread = threading.Thread(target=consume)
    thread.start()
    _wait_for(lambda: _running(one_slot.url) == 1)
    answer = httpx.post(one_slot.url + "/abort_request", json={"rid": "abort-me"}).json()
    assert answer == {"aborted": 1}
    thread.join(10)
    events = sse_events(result["body"])
    assert events[-1] == "[DONE]"
    assert events[-2]["meta_info"]["finish_reason"]["type"] == "abort"
    assert metric(one_slot.url, ABORTS) == before + 1
    assert _running(one_slot.url) == 0
    # The slot is free: a short request completes.
    quick = {"text": "y", "sampling_params": {"max_new_tokens": 2}}
    assert httpx.post(one_slot.url + "/generate", json=quick, timeout=10).status_code == 200


def test_client_disconnect_aborts_queued_and_running(one_slot: Proc) -> None:
    before = metric(one_slot.url, ABORTS)
    with httpx.Client(timeout=30) as client:
        body = {"text": "r", "stream": True, "sampling_params": LONG}
        running = client.stream("POST", one_slot.url + "/generate", json=body)
        response = running.__enter__()
        lines = response.iter_lines()  # keep a reference: a collected iterator closes the stream
        next(lines)
        # A non-streaming request behind it waits in the queue (one slot).
        queued_done = threading.Event()

        def queued() -> None:
            try:
                httpx.post(
                    one_slot.url + "/generate",
                    timeout=0.5,
                    json={"text": "q", "sampling_params": LONG},
                )
            except httpx.TimeoutException:
                queued_done.set()

        thread = threading.Thread(target=queued)
        thread.start()
        thread.join(5)
        assert queued_done.is_set()
        running.__exit__(None, None, None)
    _wait_for(lambda: metric(one_slot.url, ABORTS) == before + 2)
    _wait_for(lambda: _running(one_slot.url) == 0)


def test_abort_unknown_rid_and_abort_all(one_slot: Proc) -> None:
    assert httpx.post(one_slot.url + "/abort_request", json={"rid": "nope"}).json() == {
        "aborted": 0
    }
    assert httpx.post(one_slot.url + "/abort_request", json={"abort_all": True}).status_code == 200


def test_abort_takes_every_rid_that_starts_with_it_as_sglang_does() -> None:
    """SGLang's scheduler aborts each request whose rid starts with the given one, once the
    given rid itself is live; the simulator does the same, so a router that lets clients
    choose rids is caught here (gateway.middleware keeps rids its own and of one width)."""
    sim = start_sim("--max-running-requests", "4", name="prefix", time_scale=0.01)
    try:
        with httpx.Client(timeout=30) as client:
            streams, readers = [], []
            for rid in ("a", "ab", "b"):
                body = {"text": "x", "rid": rid, "stream": True, "sampling_params": LONG}
                stream = client.stream("POST", sim.url + "/generate", json=body)
                lines = stream.__enter__().iter_lines()
                next(lines)
                # Kept referenced: a collected iterator closes its stream (a disconnect).
                streams.append(stream)
                readers.append(lines)
            nope = client.post(sim.url + "/abort_request", json={"rid": "b-not-live"}).json()
            assert nope == {"aborted": 0}  # the given rid must itself be live
            assert client.post(sim.url + "/abort_request", json={"rid": "a"}).json() == {
                "aborted": 2
            }
            _wait_for(lambda: _running(sim.url) == 1)  # "b" still runs
            for stream in streams:
                stream.__exit__(None, None, None)
    finally:
        sim.stop()
