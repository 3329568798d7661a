"""gateway.shared_state.SharedStore against a real redis-server: bounded round trips, failures
absorbed and counted, the store skipped for retry_s, and shared state resuming."""

from __future__ import annotations

import asyncio

from bench.procs import RedisProc, start_redis
from gateway.observability.metrics import Metrics
from gateway.settings import SharedStateSettings
from gateway.shared_state import SharedStore
from tests.support.clock import Clock


def _errors(metrics: Metrics, kind: str) -> float:
    return metrics.registry.get_sample_value("flashbox_state_errors_total", {"kind": kind}) or 0.0


def _up(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("flashbox_state_up")


async def test_round_trips_and_a_store_that_dies_and_comes_back(redis_server: RedisProc) -> None:
    metrics, clock = Metrics(process_metrics=False), Clock(0.0)
    settings = SharedStateSettings(timeout_s=0.5, retry_s=1.0)
    store = SharedStore(redis_server.url, settings, metrics, clock)
    try:
        assert await store.run("set", lambda r: r.set(store.key("k"), b"v")) is True
        assert await store.run("get", lambda r: r.get(store.key("k"))) == b"v"
        assert _up(metrics) == 1

        redis_server.kill()
        assert await store.run("get", lambda r: r.get(store.key("k"))) is None
        assert _errors(metrics, "connection") == 1
        assert _up(metrics) == 0
        # Skipped for retry_s: no round trip, no second error.
        assert not store.available
        assert await store.run("get", lambda r: r.get(store.key("k"))) is None
        assert _errors(metrics, "connection") == 1

        back = start_redis(port=redis_server.port)
        try:
            clock.now += settings.retry_s
            assert await store.run("set", lambda r: r.set(store.key("k"), b"w")) is True
            assert _up(metrics) == 1
        finally:
            back.stop()
    finally:
        await store.close()


async def test_a_slow_answer_is_a_timeout_not_a_wait(redis_server: RedisProc) -> None:
    metrics = Metrics(process_metrics=False)
    # Far below BLPOP's 1 s, far above a loopback PING on a loaded 2-core box (at 5 ms a
    # fresh-clone run saw the first PING time out too: two in a row, a skip).
    store = SharedStore(redis_server.url, SharedStateSettings(timeout_s=0.2), metrics)
    try:
        await store.run("ping", lambda r: r.ping())  # the connection exists: only BLPOP waits
        assert _errors(metrics, "timeout") == 0
        started = asyncio.get_running_loop().time()
        assert await store.run("blpop", lambda r: r.blpop([store.key("empty")], 1)) is None
        assert asyncio.get_running_loop().time() - started < 0.9
        assert _errors(metrics, "timeout") == 1
        # A lone timeout is counted; the store is still asked (a late event loop, most often).
        assert _up(metrics) == 1
        assert store.available
        assert await store.run("ping", lambda r: r.ping()) is True
        # Two in a row (no answer between them): skipped for retry_s.
        for _ in range(2):
            assert await store.run("blpop", lambda r: r.blpop([store.key("empty")], 1)) is None
        assert _errors(metrics, "timeout") == 3
        assert _up(metrics) == 0
        assert not store.available
    finally:
        await store.close()


def test_keys_carry_the_prefix() -> None:
    store = SharedStore(
        "redis://127.0.0.1:1/0",
        SharedStateSettings(key_prefix="fleet-a:"),
        Metrics(process_metrics=False),
    )
    assert store.key("pin", "abc") == "fleet-a:pin:abc"
