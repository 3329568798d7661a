"""Engine faults through real simulator processes: every request ends, explicitly, in time.

Deadlines are short here (conftest: first token 3 s, idle 2 s); the client's own read timeout
(30 s) is what would catch a hung connection.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.reliability.conftest import chat_body, gateway_env, metric, sim_params
from tests.reliability.faults import stream_chat, wait_for
from tests.support.procs import Proc, start_gateway, start_sim


@pytest.fixture(scope="module")
def sims() -> Iterator[tuple[Proc, Proc]]:
    a, b = start_sim(name="a"), start_sim(name="b")
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture(scope="module")
def gateway(sims: tuple[Proc, Proc]) -> Iterator[Proc]:
    proc = start_gateway([s.url for s in sims], env=gateway_env())
    try:
        yield proc
    finally:
        proc.stop()


def engine_prompt_tokens(sims: tuple[Proc, Proc]) -> float:
    """Prompt tokens the engines prefilled: one more /generate anywhere adds a prompt's worth."""
    return sum(metric(s, "sglang:prompt_tokens_total") for s in sims)


def settled(gateway: Proc) -> bool:
    return metric(gateway, "flashbox_requests_in_flight") == 0


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        ("stall_first", "first_token_timeout"),
        ("stall:3", "stream_idle_timeout"),
        ("die:3", "engine_stream_error"),
        ("error:3", "engine_stream_error"),
        ("malformed:3", "engine_stream_error"),
    ],
)
def test_stream_fault_ends_with_error_event(
    gateway: Proc, sims: tuple[Proc, Proc], fault: str, code: str
) -> None:
    clean = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), timeout=30)
    prompt_tokens = clean.json()["usage"]["prompt_tokens"]
    retries = metric(gateway, "flashbox_retries_total")
    before = engine_prompt_tokens(sims)
    result = stream_chat(gateway, chat_body(**sim_params(fault=fault)))
    assert result.status == 200
    assert result.error is not None, result
    assert result.error["code"] == code, result
    assert result.done, "an error event must still be followed by [DONE]"
    if fault != "stall_first":
        assert result.content, "tokens before the fault were relayed"
    # Streaming had started: no retry on the other replica, one engine request in all.
    assert metric(gateway, "flashbox_retries_total") == retries
    if fault != "stall_first":  # a stall_first request is never prefilled
        assert engine_prompt_tokens(sims) - before == prompt_tokens
    assert wait_for(lambda: settled(gateway)), "in-flight count leaked"


@pytest.mark.parametrize(
    ("fault", "status"), [("503", 503), ("stall_first", 504), ("die:3", 502), ("error:3", 502)]
)
def test_non_streaming_fault_is_an_error_status(gateway: Proc, fault: str, status: int) -> None:
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        json=chat_body(**sim_params(fault=fault)),
        timeout=30,
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"]
    assert error["type"]
    assert wait_for(lambda: settled(gateway))


def test_stalled_engine_request_is_released(gateway: Proc, sims: tuple[Proc, Proc]) -> None:
    """After a first-token timeout the engine no longer holds the stalled request."""
    stream_chat(gateway, chat_body(**sim_params(fault="stall_first")))

    def engines_idle() -> bool:
        return all(
            httpx.get(s.url + "/server_info", timeout=5).json()["num_running_reqs"] == 0
            for s in sims
        )

    assert wait_for(engines_idle)
    assert wait_for(lambda: settled(gateway))


def test_engine_down_at_start_then_recovers() -> None:
    from tests.support.procs import free_port, start_process

    port = free_port()
    gateway = start_gateway([f"http://127.0.0.1:{port}"], env=gateway_env())
    sim: Proc | None = None
    try:
        assert httpx.get(gateway.url + "/ready", timeout=5).status_code == 503
        refused = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), timeout=30)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] in ("no_healthy_replica", "engine_unreachable")
        sim = start_process(
            "engine.sim",
            ["--host", "127.0.0.1", "--port", "{port}", "--time-scale", "0.001"],
            port=port,
        )
        assert wait_for(lambda: httpx.get(gateway.url + "/ready", timeout=5).status_code == 200, 15)
        ok = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), timeout=30)
        assert ok.status_code == 200, ok.text
        assert wait_for(lambda: settled(gateway))
    finally:
        if sim is not None:
            sim.stop()
        gateway.stop()


def test_engine_crash_mid_stream_then_replica_returns() -> None:
    from tests.support.procs import start_process

    sim = start_sim(name="crashy")
    port = sim.port
    gateway = start_gateway([sim.url], env=gateway_env())
    restarted: Proc | None = None
    try:
        result = stream_chat(gateway, chat_body(**sim_params(fault="crash:3")))
        assert result.status == 200
        assert result.done
        assert result.error is not None
        assert wait_for(lambda: not sim.alive())
        assert wait_for(lambda: httpx.get(gateway.url + "/ready", timeout=5).status_code == 503, 15)
        down = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), timeout=30)
        assert down.status_code == 503
        restarted = start_process(
            "engine.sim",
            ["--host", "127.0.0.1", "--port", "{port}", "--time-scale", "0.001"],
            port=port,
        )
        assert wait_for(lambda: httpx.get(gateway.url + "/ready", timeout=5).status_code == 200, 15)
        ok = stream_chat(gateway, chat_body())
        assert ok.status == 200
        assert ok.done
        assert ok.error is None
        assert ok.content
        assert wait_for(lambda: settled(gateway))
    finally:
        sim.stop()
        if restarted is not None:
            restarted.stop()
        gateway.stop()


def test_slow_health_never_hangs_requests() -> None:
    from tests.support.procs import start_process

    # /health answers after 3 s, past the gateway's 0.5 s probe timeout: the replica goes down.
    sim = start_process(
        "engine.sim",
        ["--host", "127.0.0.1", "--port", "{port}", "--time-scale", "0.001",
         "--health-delay", "3"],
        health_path="/server_info",
    )  # fmt: skip
    gateway = start_gateway([sim.url], env=gateway_env(FLASHBOX_HEALTH__TIMEOUT_S="0.5"))
    try:
        for _ in range(3):
            response = httpx.post(
                gateway.url + "/v1/chat/completions", json=chat_body(), timeout=30
            )
            assert response.status_code in (200, 503), response.text
            if response.status_code == 503:
                assert response.json()["error"]["code"]
        assert httpx.get(gateway.url + "/health", timeout=5).status_code == 200
        assert wait_for(lambda: settled(gateway))
    finally:
        gateway.stop()
        sim.stop()
