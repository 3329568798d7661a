"""#38: a fleet gateway's route, cancelled at each of its round trips to a real redis-server
(made slow by a loopback proxy, tests/fleet/slow_store.py), gives back everything it took: the
pick's bookkeeping, the pin and the budget charge of a new conversation, the half-open
breaker's trial, the reports its fetch carried. Before, a client that left during the claim
kept the replica's trial forever: that gateway never routed there again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bench.procs import RedisProc
from gateway.observability.metrics import Metrics
from gateway.routing import Outcome, Replica, RequestContext
from gateway.routing.fleet import FleetPicker
from gateway.routing.picker import Outstanding
from gateway.routing.shared_tables import SharedRoutingTables
from gateway.settings import RoutingSettings, SharedStateSettings
from gateway.shared_state import SharedStore
from tests.fleet.slow_store import SlowStore, slow_store
from tests.support.clock import Clock

# Long enough that a held answer never times out here (the proxy holds it well under this).
STORE_TIMEOUT_S = 5.0
# How long the proxy holds what it passes while a request is to be cancelled.
HOLD_S = 0.3


class OneReplicaGateway:
    """A fleet picker on one replica, through the proxy, with a clock the test moves (the
    breaker's); its breaker opens at the first failure."""

    def __init__(self, url: str, report_delay_s: float = 0.001, **routing: Any) -> None:
        self.replica = Replica(name="r0:1", base_url="http://r0:1", healthy=True)
        self.clock = Clock()
        self.store = SharedStore(
            url,
            SharedStateSettings(timeout_s=STORE_TIMEOUT_S, retry_s=0.05),
            Metrics(process_metrics=False),
        )
        settings = RoutingSettings.model_validate(
            {"breaker_failures": 1, "breaker_open_s": 5.0, **routing}
        )
        self.tables = SharedRoutingTables(self.store, settings)
        self.picker = FleetPicker(
            [self.replica],
            settings,
            lambda outcome, kind: None,
            self.tables,
            claimed=lambda result: None,
            max_pending_writes=8,
            write_skipped=lambda: None,
            report_delay_s=report_delay_s,
            clock=self.clock,
        )
        self._rid = 0

    def ctx(self, session: str | None) -> RequestContext:
        self._rid += 1
        return RequestContext(f"req-{self._rid}", session, "p")

    async def turn(self, session: str, prompt_tokens: int) -> None:
        c = self.ctx(session)
        pick = await self.picker.route(c)
        self.picker.report(c, pick.replica, Outcome.OK, prompt_tokens=prompt_tokens)
        await self.picker.settle()

    async def open_breaker(self) -> None:
        """A failed request opens the breaker; once open_s passed it is half-open."""
        failing = self.ctx(None)  # unkeyed: routed without the store
        await self.picker.route(failing)
        self.picker.report(failing, self.replica, Outcome.UPSTREAM_ERROR)
        self.clock.now += 5.0

    async def close(self) -> None:
        await self.picker.aclose()
        await self.store.close()


@pytest.fixture
async def proxied(redis_server: RedisProc) -> AsyncIterator[SlowStore]:
    async with slow_store(redis_server.port) as proxy:
        yield proxy


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(400):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


async def cancelled(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_client_gone_during_the_claim_leaks_neither_pick_nor_trial(
    proxied: SlowStore,
) -> None:
    gw = OneReplicaGateway(proxied.url)
    picker, replica = gw.picker, gw.replica
    try:
        await gw.turn("earlier", 1000)  # scripts loaded, the watch subscribed
        await gw.open_breaker()
        proxied.to_client_s = HOLD_S
        leaving = gw.ctx("new-conversation")
        route = asyncio.create_task(picker.route(leaving))
        # The pick takes the half-open trial between the fetch's answer and the claim's: the
        # trial taken while route still waits is the claim's round trip.
        await until(lambda: not replica.breaker.allows(gw.clock()), "the pick took the trial")
        assert not route.done()
        await cancelled(route)
        proxied.to_client_s = 0.0

        # The trial is free: the next request is routed to the replica (before: NoReplicaError
        # for as long as the gateway ran).
        following = gw.ctx("following")
        assert (await picker.route(following)).replica is replica
        picker.report(following, replica, Outcome.OK, prompt_tokens=500)
        assert replica.breaker.opened_at is None
        # The conversation never reached the engine: not placed here, not charged.
        assert picker.pins.peek("new-conversation") is None
        await picker.settle()
        assert picker.pending() == Outstanding()
    finally:
        await gw.close()


async def test_a_client_gone_during_the_claim_gives_back_the_budget_charge(
    proxied: SlowStore,
) -> None:
    gw = OneReplicaGateway(proxied.url)
    picker, replica = gw.picker, gw.replica
    try:
        await gw.turn("earlier", 1000)
        charged = picker.live_sessions(replica)
        proxied.to_client_s = HOLD_S
        leaving = gw.ctx("new-conversation")
        route = asyncio.create_task(picker.route(leaving))
        await until(lambda: picker.pins.peek("new-conversation") is not None, "the pick")
        assert picker.live_sessions(replica) == charged + 1  # counted at the pick
        await cancelled(route)
        assert picker.pins.peek("new-conversation") is None
        assert picker.live_sessions(replica) == charged
        assert picker.pending() == Outstanding()
    finally:
        await gw.close()


async def test_a_client_gone_during_the_fetch_puts_back_the_reports_it_carried(
    proxied: SlowStore, redis_server: RedisProc
) -> None:
    """Reports wait to ride the next fetch (state.report_delay_s, longer than the test); a
    fetch cut off before it reached the store must leave them waiting, not drop them: the
    lineage's prompt tokens are what the next gateway's turn is verified against."""
    gw = OneReplicaGateway(proxied.url, report_delay_s=2.0)
    reader = SharedStore(
        redis_server.url,
        SharedStateSettings(timeout_s=STORE_TIMEOUT_S),
        Metrics(process_metrics=False),
    )
    tables = SharedRoutingTables(reader, RoutingSettings())
    picker = gw.picker
    try:
        await gw.turn("reported", 8000)  # placed (claimed), its report waiting
        proxied.to_store_s = HOLD_S
        leaving = gw.ctx("new-conversation")
        route = asyncio.create_task(picker.route(leaving))
        await until(lambda: proxied.held_to_store > 0, "the fetch is on its way")
        await cancelled(route)
        proxied.to_store_s = 0.0
        assert picker.pending() == Outstanding()
        # The next fetch carries them.
        await gw.turn("another", 1000)
        snapshot = await tables.fetch("reported", None, None, [], count=False, reports=[])
        assert snapshot is not None
        assert snapshot.pin is not None
        assert snapshot.pin.last_prompt_tokens == 8000
    finally:
        await reader.close()
        await gw.close()


async def test_a_report_deferred_behind_the_stores_answer_ends_the_trial_at_once(
    proxied: SlowStore,
) -> None:
    """A pinned turn shorter than the store's round trip has its report wait for the fetch
    (gateway.routing.fleet); the breaker's trial is over when the report comes, not then."""
    gw = OneReplicaGateway(proxied.url)
    picker, replica = gw.picker, gw.replica
    try:
        await gw.turn("pinned", 1000)
        await gw.turn("pinned", 1200)  # the store confirmed the pin: the next turn goes first
        await gw.open_breaker()
        proxied.to_client_s = HOLD_S
        trial = gw.ctx("pinned")
        assert (await picker.route(trial)).replica is replica  # sent before the store answers
        assert not replica.breaker.allows(gw.clock())
        picker.report(trial, replica, Outcome.OK, prompt_tokens=1400, cached_tokens=1024)
        assert replica.breaker.opened_at is None
        assert picker.pending() == Outstanding()
        proxied.to_client_s = 0.0
        await picker.settle()
    finally:
        await gw.close()
