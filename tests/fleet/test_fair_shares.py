"""A fleet's shares of a replica's slots (gateway/fair_shares.py): the allocation, and two
gateways trading their demand through a real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from bench.procs import RedisProc
from gateway.fair_shares import FleetShares, allocate
from gateway.fairness import FairSlots
from gateway.observability.metrics import Metrics
from gateway.settings import FairnessSettings, KeyShare, SharedStateSettings
from gateway.shared_state import SharedStore

FLOOD, LIGHT, BATCH = "f" * 12, "1" * 12, "b" * 12
# Generous: this box is shared and loaded.
STATE = SharedStateSettings(timeout_s=0.5, retry_s=60.0)


def test_a_flow_that_wants_little_gets_what_it_wants_and_the_rest_is_shared() -> None:
    settings = FairnessSettings()
    assert allocate(4, {FLOOD: 24, LIGHT: 1}, settings) == {FLOOD: 3.0, LIGHT: 1.0}
    assert allocate(4, {FLOOD: 24, BATCH: 24}, settings) == {FLOOD: 2.0, BATCH: 2.0}
    assert allocate(4, {FLOOD: 1, LIGHT: 1}, settings) == {FLOOD: 1.0, LIGHT: 1.0}
    assert allocate(4, {}, settings) == {}


def test_weights_and_priority_bands() -> None:
    weighted = FairnessSettings(keys={FLOOD: KeyShare(weight=3)})
    assert allocate(4, {FLOOD: 24, BATCH: 24}, weighted) == {FLOOD: 3.0, BATCH: 1.0}
    banded = FairnessSettings(keys={BATCH: KeyShare(priority=-1), LIGHT: KeyShare(priority=1)})
    given = allocate(4, {FLOOD: 24, BATCH: 24, LIGHT: 1}, banded)
    # The light key's band first, then the default band; the batch band gets what is left.
    assert given == {LIGHT: 1.0, FLOOD: 3.0}


class Gateway:
    def __init__(self, url: str, settings: FairnessSettings, capacity: int = 4) -> None:
        self.metrics = Metrics(process_metrics=False)
        self.store = SharedStore(url, STATE, self.metrics)
        self.shares = FleetShares(
            self.store, settings, self.metrics, lambda: ["r1"], lambda _name: capacity
        )
        self.slots = FairSlots(settings, self.metrics, self.shares.capacity, service_s=20)
        # Refreshed by hand, one exchange at a time, as the loop would.
        self.shares.attach(self.slots)
        self.closed = False

    def share(self) -> float | None:
        return self.metrics.registry.get_sample_value(
            "flashbox_fair_share_slots", {"replica": "r1"}
        )

    async def close(self) -> None:
        """Its store connection closed (the shares loop is never started here)."""
        if not self.closed:
            self.closed = True
            await self.store.close()


@contextlib.asynccontextmanager
async def gateways(
    url: str, count: int, settings: FairnessSettings | None = None, capacity: int = 4
) -> AsyncIterator[list[Gateway]]:
    """`count` gateways on the store at `url`, closed on the way out."""
    made = [Gateway(url, settings or FairnessSettings(), capacity) for _ in range(count)]
    try:
        yield made
    finally:
        for gateway in made:
            await gateway.close()


@pytest.fixture
async def pair(redis_server: RedisProc) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with gateways(redis_server.url, 2) as (a, b):
        yield a, b


async def test_two_gateways_split_a_replica_by_their_flows_demand(
    pair: tuple[Gateway, Gateway],
) -> None:
    a, b = pair
    flood = [a.slots.claim("r1", FLOOD) for _ in range(24)]
    await a.shares.refresh()
    assert a.shares.capacity("r1") == 4  # alone on the replica
    assert sum(slot.granted for slot in flood) == 4
    light = b.slots.claim("r1", LIGHT)
    assert light.granted  # a gateway always has a slot: its first request goes at once
    await b.shares.refresh()
    await a.shares.refresh()
    assert (a.shares.capacity("r1"), b.shares.capacity("r1")) == (3, 1)
    assert (a.share(), b.share()) == (3, 1)
    # A's first freed slot is not handed on (it had 4 running, its share is 3); from then on
    # it keeps 3 running.
    a.slots.release(flood[0])
    assert a.slots.running("r1") == 3
    assert not flood[4].granted
    a.slots.release(flood[1])
    assert a.slots.running("r1") == 3
    assert flood[4].granted
    # B's demand is gone: A takes the whole replica again with its next refresh.
    b.slots.release(light)
    await b.shares.refresh()
    await a.shares.refresh()
    assert a.shares.capacity("r1") == 4
    assert a.slots.running("r1") == 4


async def test_one_flow_through_two_gateways_is_one_flow(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    for _ in range(12):
        a.slots.claim("r1", FLOOD)
        b.slots.claim("r1", FLOOD)
    b.slots.claim("r1", LIGHT)
    for gateway in (a, b, a):
        await gateway.shares.refresh()
    # The flood's 3 slots split by its demand at each gateway; the light key's slot is B's.
    assert a.shares.capacity("r1") == 2
    assert b.shares.capacity("r1") == 3


async def _eight_each(a: Gateway, b: Gateway) -> None:
    """A's flood and B's light key each want eight slots of r1; both have traded demand."""
    for _ in range(8):
        a.slots.claim("r1", FLOOD)
        b.slots.claim("r1", LIGHT)
    await b.shares.refresh()
    await a.shares.refresh()


async def test_a_gateway_that_stops_writing_is_forgotten(redis_server: RedisProc) -> None:
    settings = FairnessSettings(fleet_stale_s=0.2)
    async with gateways(redis_server.url, 2, settings) as (a, b):
        await _eight_each(a, b)
        assert a.shares.capacity("r1") == 2
        await b.close()  # B is gone without a word
        await asyncio.sleep(0.3)
        await a.shares.refresh()
        assert a.shares.capacity("r1") == 4


async def test_without_the_store_each_gateway_fills_the_replica_alone(
    redis_server: RedisProc, pair: tuple[Gateway, Gateway]
) -> None:
    a, b = pair
    await _eight_each(a, b)
    assert a.shares.capacity("r1") == 2
    redis_server.stop()
    await a.shares.refresh()
    assert a.shares.capacity("r1") == 4
    assert a.share() == 4


async def test_an_idle_gateway_may_fill_what_the_others_leave(
    pair: tuple[Gateway, Gateway],
) -> None:
    a, b = pair
    await a.shares.refresh()
    assert a.shares.capacity("r1") == 4  # nobody wants the replica: a burst here may fill it
    for _ in range(2):
        b.slots.claim("r1", LIGHT)
    await b.shares.refresh()
    await a.shares.refresh()
    assert a.shares.capacity("r1") == 2


async def test_idle_gateways_split_what_is_left(redis_server: RedisProc) -> None:
    """Bursts at every idle gateway at once must not each take all that is left."""
    async with gateways(redis_server.url, 3, capacity=8) as (busy, *idle):
        for _ in range(2):
            busy.slots.claim("r1", FLOOD)
        for gateway in (*idle, busy, *idle):
            await gateway.shares.refresh()
        # 8 slots, 2 wanted: 6 left for the two idle gateways, 3 each.
        assert [gateway.shares.capacity("r1") for gateway in idle] == [3, 3]
