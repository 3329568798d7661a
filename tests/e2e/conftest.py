"""Real processes on loopback: simulator replicas and the gateway, driven by the openai client."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping

import httpx
import openai
import pytest

from tests.support.engines import Engine, selected_kinds, start_engine
from tests.support.idle import check_idle
from tests.support.procs import Proc, start_gateway, start_sim

MODEL = "glm-5.3-flash"
GATEWAY_ENV = {
    "FLASHBOX_UPSTREAM__FORWARD_CUSTOM_PARAMS": "true",
    "FLASHBOX_HEALTH__INTERVAL_S": "0.2",
    "FLASHBOX_LIMITS__MAX_BODY_BYTES": "200000",
    "FLASHBOX_API_KEYS": "",
}


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    proc = start_sim()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def gateway(sim: Proc) -> Iterator[Proc]:
    proc = start_gateway([sim.url], env=GATEWAY_ENV)
    try:
        yield proc
        check_idle(proc)  # every request of the module gave back what it took
    finally:
        proc.stop()


def sim_and_gateway(
    *sim_args: str, time_scale: float = 0.001, env: Mapping[str, str] | None = None
) -> Iterator[tuple[Proc, Proc]]:
    """A simulator with `sim_args` and a gateway (GATEWAY_ENV plus `env`) in front of it, for a
    module fixture to `yield from`."""
    sim = start_sim(*sim_args, time_scale=time_scale)
    try:
        gateway = start_gateway([sim.url], env={**GATEWAY_ENV, **(env or {})})
        try:
            yield sim, gateway
            check_idle(gateway)
        finally:
            gateway.stop()
    finally:
        sim.stop()


def client_for(proc: Proc, api_key: str = "unused", **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=proc.url + "/v1",
        api_key=api_key,
        max_retries=0,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
def client(gateway: Proc) -> Iterator[openai.OpenAI]:
    with client_for(gateway) as c:
        yield c


def sim_body(**sim: object) -> dict[str, object]:
    """extra_body that steers the simulator (the gateway forwards custom_params in tests)."""
    return {"custom_params": {"sim": sim}}


def metric_sum(proc: Proc, name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of a metric's samples on a process's /metrics, optionally filtered by labels."""
    text = httpx.get(proc.url + "/metrics", timeout=5).text
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", re.MULTILINE)
    for match in pattern.finditer(text):
        label_text = match.group(1) or ""
        if labels and not all(f'{k}="{v}"' in label_text for k, v in labels.items()):
            continue
        total += float(match.group(2))
    return total


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Polls a condition; generous timeout, since this box is shared (no timing assertions)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def engine_gateway_env(engine: Engine, **extra: str) -> dict[str, str]:
    """GATEWAY_ENV for a gateway in front of `engine`: the simulator's knobs travel only to
    the simulator (the real engine would ignore them, but the suites assert that nothing the
    gateway sends is a field the engine does not know)."""
    forward = "true" if engine.is_sim else "false"
    return {
        **GATEWAY_ENV,
        "FLASHBOX_UPSTREAM__FORWARD_CUSTOM_PARAMS": forward,
        # The gateway's own ceiling on max_tokens above any engine's context (the simulator's
        # is 1M), so an output past the context reaches the engine and is its refusal to test
        # (under the default ceiling chat lowers it, as the other faces do).
        "FLASHBOX_LIMITS__MAX_TOKENS": str(4 * 1024 * 1024),
        **extra,
    }


@pytest.fixture(scope="session", params=selected_kinds())
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """The engine the engine-generic suites run over: the simulator, and under
    `make test-engine` the real sglang-kt server on this CPU (tests/support/engines.py)."""
    started = start_engine(request.param)
    try:
        yield started
    finally:
        started.proc.stop()


@pytest.fixture(scope="session")
def engine_gateway(engine: Engine) -> Iterator[Proc]:
    proc = start_gateway([engine.url], env=engine_gateway_env(engine))
    try:
        yield proc
        check_idle(proc)
    finally:
        proc.stop()
