"""gateway.shared_state.SharedStore under bursts, against a real redis-server: calls cut short
mid-command (timed out or cancelled) leave no answer behind for the next caller and no
connection or slot taken; a call cancelled just as a connection frees does not strand the
next one; a burst on a cold pool, on a stalled event loop, connects within the calls' bound."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from bench.procs import RedisProc
from gateway.observability.metrics import Metrics
from gateway.settings import SharedStateSettings
from gateway.shared_state import SharedStore
from tests.support.clock import Clock


def _errors(metrics: Metrics, kind: str) -> float:
    return metrics.registry.get_sample_value("flashbox_state_errors_total", {"kind": kind}) or 0.0


def _echo(token: str) -> Callable[[aioredis.Redis], Awaitable[Any]]:
    """ECHO answers its own argument: an answer left unread on a connection would reach the
    next caller as someone else's token."""
    return lambda client: client.echo(token)


def _blpop(key: str) -> Callable[[aioredis.Redis], Awaitable[Any]]:
    return lambda client: client.blpop([key], 5)


@pytest.fixture
async def observer(redis_server: RedisProc) -> AsyncIterator[aioredis.Redis]:
    """A plain client beside the store's: pauses the server, reads what it sees."""
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        await client.aclose()


async def _all_answer_their_own(store: SharedStore, calls: int, round_: int) -> None:
    tokens = [f"round-{round_}-call-{i}" for i in range(calls)]
    answers = await asyncio.gather(*(store.run("echo", _echo(t)) for t in tokens))
    assert answers == [t.encode() for t in tokens]


async def test_a_burst_cut_short_mid_command_leaves_no_stale_answer_nor_a_connection_taken(
    redis_server: RedisProc, observer: aioredis.Redis
) -> None:
    metrics, clock = Metrics(process_metrics=False), Clock(0.0)
    settings = SharedStateSettings(timeout_s=0.5, retry_s=1.0, max_connections=4)
    store = SharedStore(redis_server.url, settings, metrics, clock)
    try:
        await _all_answer_their_own(store, 4, 0)  # the pool's four connections are open
        # Every command sent now waits for its answer until the pause ends, past the bound.
        await observer.client_pause(800, all=True)
        started = time.perf_counter()
        burst = [
            asyncio.create_task(store.run("echo", _echo(f"paused-{i}")))
            for i in range(4 * settings.max_connections)
        ]
        await asyncio.sleep(0.1)
        # Two of the four sent (mid-command) and two of those waiting for a connection.
        cancelled = (0, 2, 5, 9)
        for i in cancelled:
            burst[i].cancel()
        await asyncio.wait(burst)
        # The bound held for every call, the ones that waited for a connection too.
        assert time.perf_counter() - started < settings.timeout_s + 0.25
        for i, task in enumerate(burst):
            if i in cancelled:
                assert task.cancelled()
            else:
                assert task.result() is None
        assert _errors(metrics, "timeout") == len(burst) - len(cancelled)

        await observer.ping()  # answered once the pause is over
        clock.now += settings.retry_s
        for round_ in range(1, 4):
            await _all_answer_their_own(store, 4 * settings.max_connections, round_)
        # Never more connections than the bound (the observer has one of its own).
        assert (await observer.info("clients"))["connected_clients"] <= settings.max_connections + 1

        # Every slot and connection came back: max_connections calls can all be in flight.
        keys = [store.key("held", str(i)) for i in range(settings.max_connections)]
        held = [asyncio.create_task(store.run("blpop", _blpop(k))) for k in keys]
        deadline = time.perf_counter() + settings.timeout_s / 2
        while (await observer.info("clients"))["blocked_clients"] < len(keys):
            assert time.perf_counter() < deadline, "a slot or a connection never came back"
            await asyncio.sleep(0.005)
        for k in keys:
            await observer.rpush(k, b"go")
        assert await asyncio.gather(*held) == [(k.encode(), b"go") for k in keys]
    finally:
        await store.close()


@pytest.mark.parametrize("when", ["at once", "next in line"])
async def test_a_call_cancelled_as_a_connection_frees_does_not_strand_the_next(
    redis_server: RedisProc, when: str
) -> None:
    """The cancellation lands in the step that frees the connection ("at once") or just
    before the woken caller runs ("next in line"): either way the next caller gets it. Before
    the fix, the first stranded it until its own timeout (Python 3.11's asyncio.Condition in
    redis-py's BlockingConnectionPool lost the wake-up)."""
    settings = SharedStateSettings(timeout_s=2.0, max_connections=1)
    store = SharedStore(redis_server.url, settings, Metrics(process_metrics=False))
    waiters: list[asyncio.Task[Any]] = []

    async def hold(client: aioredis.Redis) -> str:
        await client.blpop([store.key("nothing")], 0.1)
        first = waiters[0]
        if when == "at once":
            first.cancel()
        else:
            asyncio.get_running_loop().call_soon(first.cancel)
        return "held"

    try:
        holder = asyncio.create_task(store.run("hold", hold))
        await asyncio.sleep(0.03)
        for token in ("first", "second"):
            waiters.append(asyncio.create_task(store.run("echo", _echo(token))))
            await asyncio.sleep(0.01)
        started = time.perf_counter()
        assert await holder == "held"
        second = await waiters[1]
        assert time.perf_counter() - started < settings.timeout_s / 2
        assert second == b"second"
        # Cancelled, or (the cancellation landing after it was answered) answered its own.
        assert waiters[0].cancelled() or waiters[0].result() == b"first"
    finally:
        await store.close()


async def test_a_cold_burst_on_a_stalled_loop_connects_within_the_calls_bound(
    redis_server: RedisProc,
) -> None:
    """A burst on a cold pool opens a connection per call, all at once, on one event loop; a
    loop stalled past state.connect_timeout_s (a loaded box, a CPU-bound thread holding the GIL)
    failed them all with "Timeout connecting to server", though each call had time left."""
    metrics = Metrics(process_metrics=False)
    settings = SharedStateSettings(timeout_s=2.0, connect_timeout_s=0.05, max_connections=8)
    store = SharedStore(redis_server.url, settings, metrics)
    try:
        burst = [
            asyncio.create_task(store.run("ping", lambda client: client.ping()))
            for _ in range(settings.max_connections)
        ]
        # After the calls' first steps (their connects started): the loop stalls past the
        # connect bound, as a busy one would.
        asyncio.get_running_loop().call_soon(time.sleep, 0.2)
        assert await asyncio.gather(*burst) == [True] * len(burst)
        assert _errors(metrics, "timeout") == 0
    finally:
        await store.close()
