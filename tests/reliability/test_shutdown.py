"""SIGTERM: stop accepting, let in-flight streams finish within the grace period, abort the
rest on the engine, exit 0. Real processes."""

from __future__ import annotations

import signal
import threading

import httpx

from tests.reliability.conftest import chat_body, gateway_env, metric, sim_params
from tests.reliability.faults import StreamResult, stream_chat, wait_for
from tests.support.procs import start_gateway, start_sim


def test_sigterm_drains_then_aborts_then_exits_zero() -> None:
    # Slow enough that a 1,500-token answer takes about a second.
    sim = start_sim(name="slow", time_scale=0.02)
    gateway = start_gateway(
        [sim.url],
        env=gateway_env(
            FLASHBOX_SHUTDOWN__GRACE_S="4",
            FLASHBOX_TIMEOUTS__FIRST_TOKEN_S="60",
            FLASHBOX_TIMEOUTS__STREAM_IDLE_S="60",
        ),
    )
    results: dict[str, StreamResult] = {}

    def run(name: str, body: dict[str, object]) -> None:
        results[name] = stream_chat(gateway, body, timeout=60)

    finishing = threading.Thread(
        target=run,
        args=("finishing", chat_body(max_tokens=2000, **sim_params(content_tokens=1500))),
    )
    stalled = threading.Thread(
        target=run, args=("stalled", chat_body(**sim_params(fault="stall:3")))
    )
    try:
        stalled.start()
        finishing.start()
        assert wait_for(lambda: metric(gateway, "flashbox_requests_in_flight") == 2)
        aborted_before = metric(sim, "sglang:num_aborted_requests_total")
        gateway.popen.send_signal(signal.SIGTERM)

        def refused() -> bool:
            try:
                httpx.get(gateway.url + "/health", timeout=2)
            except httpx.TransportError:  # refused, or closed while draining
                return True
            return False

        assert wait_for(refused), "still accepting connections after SIGTERM"
        finishing.join(60)
        stalled.join(60)
        assert gateway.popen.wait(30) == 0, gateway.log()[-3000:]

        done = results["finishing"]
        assert done.status == 200
        assert done.done
        assert done.error is None, done.error
        assert len(done.content) > 1000

        cut = results["stalled"]
        assert cut.status == 200
        assert cut.done, "the aborted stream still ends with [DONE]"
        assert cut.error is not None
        assert "abort" in str(cut.error["message"]).lower()
        assert metric(sim, "sglang:num_aborted_requests_total") == aborted_before + 1
        assert "aborting 1 requests on the engine" in gateway.log()
    finally:
        gateway.stop()
        sim.stop()
