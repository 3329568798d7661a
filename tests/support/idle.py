"""The gateway is idle again: nothing a request took is still held (issue: every resource has
one owner). Checked after every in-process test (tests/gateway/conftest.py) and after e2e
requests through /metrics (`assert_idle_metrics`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.procs import Proc
from gateway.observability.metrics import IDLE_GAUGES
from gateway.state import AppState

# Aborts run as background tasks (an abort the engine does not answer takes up to its tries:
# 4 x upstream.abort_timeout_s plus the pauses, ~6 s), and a stream's last bookkeeping runs
# after its last byte: how long the gateway may take to be idle after its last request.
SETTLE_S = 8.0


async def assert_idle(state: AppState, settle_s: float = SETTLE_S) -> None:
    deadline = time.monotonic() + settle_s
    while True:
        held = {kind: n for kind, n in state.outstanding().items() if n}
        if not held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the gateway still holds {held} after its requests ended")
        await asyncio.sleep(0.01)


def held_in_metrics(text: str) -> dict[str, float]:
    held: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in IDLE_GAUGES and sample.value:
                held[f"{sample.name}{sample.labels}"] = sample.value
    return held


async def assert_idle_metrics(base_url: str, settle_s: float = SETTLE_S, **client: Any) -> None:
    """The same through a gateway process's /metrics."""
    deadline = time.monotonic() + settle_s
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0, **client) as http:
        while True:
            held = held_in_metrics((await http.get("/metrics")).text)
            if not held:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the gateway still holds {held} after its requests ended")
            await asyncio.sleep(0.05)


def check_idle(gateway: Proc, settle_s: float = SETTLE_S) -> None:
    """For an e2e fixture's teardown: the gateway process, if still up, holds nothing once its
    module's tests are done (their clients closed every request)."""
    if not gateway.alive():
        return
    asyncio.run(assert_idle_metrics(gateway.url, settle_s))
