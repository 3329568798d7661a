"""gateway.routing.shared_tables against a real redis-server: atomic claims (two claimants, one
winner), idle TTLs on every key, and the budget counts every gateway reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bench.procs import RedisProc
from gateway.observability.metrics import Metrics
from gateway.routing.shared_tables import (
    Claim,
    Report,
    SessionWrite,
    SharedRoutingTables,
    Snapshot,
)
from gateway.settings import RoutingSettings, SharedStateSettings
from gateway.shared_state import SharedStore

REPLICAS = ("r0:1", "r1:1", "r2:1")


class Gateway:
    """One gateway's connection to the store (each gateway has its own)."""

    def __init__(self, url: str, routing: RoutingSettings) -> None:
        self.store = SharedStore(
            # Generous: these tests check what the store agrees on, not how fast (a loaded CI
            # box opens 64 connections and loads the scripts within the first burst).
            url,
            SharedStateSettings(timeout_s=5.0),
            Metrics(process_metrics=False),
        )
        self.tables = SharedRoutingTables(self.store, routing)


@pytest.fixture
async def pair(redis_server: RedisProc) -> AsyncIterator[tuple[Gateway, Gateway]]:
    routing = RoutingSettings(pin_idle_ttl_s=60, head_idle_ttl_s=30, pin_table_size=100)
    a, b = Gateway(redis_server.url, routing), Gateway(redis_server.url, routing)
    try:
        yield a, b
    finally:
        await a.store.close()
        await b.store.close()


def counted(snapshot: Snapshot | None) -> dict[str, tuple[int, int]]:
    assert snapshot is not None
    assert snapshot.counts is not None
    return snapshot.counts


def new_pin(key: str, replica: str, **fields: object) -> Claim:
    return Claim(key, replica, "main", 0, (), "nx", **fields)  # type: ignore[arg-type]


async def test_two_claimants_of_one_new_lineage_one_winner(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    # A burst on two cold pools: 40 connections each, opened at once (tests/fleet/
    # test_store_bursts.py has what made it fail on a loaded box).
    keys = [f"lineage-{i}" for i in range(40)]
    results = await asyncio.gather(
        *(gw.tables.claim(new_pin(k, replica)) for k in keys for gw, replica in
          ((a, "r0:1"), (b, "r1:1")))
    )  # fmt: skip
    for i in range(len(keys)):
        first, second = results[2 * i], results[2 * i + 1]
        assert first is not None
        assert second is not None
        assert sorted([first.status, second.status]) == ["adopted", "won"]
        # Both answer the winner's replica: the loser sends its request there.
        assert first.pin.replica == second.pin.replica
    # One live lineage per key, on its winner's replica, and the counts say so.
    snapshot = await a.tables.fetch("other", None, None, REPLICAS)
    assert snapshot is not None
    assert sum(live for live, _ in counted(snapshot).values()) == len(keys)


async def test_a_move_from_where_the_pin_no_longer_is_adopts_the_pin(
    pair: tuple[Gateway, Gateway],
) -> None:
    a, b = pair
    await a.tables.claim(new_pin("k", "r0:1"))
    moved = await a.tables.claim(
        Claim("k", "r1:1", "main", 0, (), "move", expected="r0:1", leave_behind=True)
    )
    assert moved is not None
    assert moved.status == "won"
    # b saw the pin on r0 before a moved it: its failover to r2 loses to a's spill.
    stale = await b.tables.claim(Claim("k", "r2:1", "main", 0, (), "move", expected="r0:1"))
    assert stale is not None
    assert (stale.status, stale.pin.replica) == ("adopted", "r1:1")
    # A pin already where the claim would put it is not written again.
    same = await b.tables.claim(Claim("k", "r1:1", "main", 9, (), "move", expected="r0:1"))
    assert same is not None
    assert (same.status, same.pin.replica) == ("same", "r1:1")


async def test_a_pin_made_apart_wins_only_if_its_turn_came_later(
    pair: tuple[Gateway, Gateway],
) -> None:
    a, b = pair
    await a.tables.claim(new_pin("k", "r0:1"))
    await asyncio.sleep(0.005)
    assert await a.tables.report([Report("k", "r0:1", 9000, (), None)])  # a turn of k ended
    touched = await a.tables.fetch("k", None, None, REPLICAS)
    assert touched is not None
    assert touched.pin is not None
    used = touched.pin.last_used_ms  # the report's time, on the store's clock
    assert used <= touched.now_ms
    # b served a turn elsewhere while cut off: before that last use, then after it.
    older = await b.tables.claim(Claim("k", "r1:1", "main", 0, (), "newer", turn_ms=used - 1))
    assert older is not None
    assert (older.status, older.pin.replica) == ("adopted", "r0:1")
    newer = await b.tables.claim(Claim("k", "r1:1", "main", 0, (), "newer", turn_ms=used + 1))
    assert newer is not None
    assert (newer.status, newer.pin.replica, newer.pin.last_used_ms) == ("won", "r1:1", used + 1)


async def test_fetch_reads_what_a_pick_needs_and_carries_reports(
    pair: tuple[Gateway, Gateway],
) -> None:
    a, b = pair
    session = SessionWrite("s1", "main-1", "head-1", True)
    await a.tables.claim(new_pin("main-1", "r1:1", session=session))
    # Two turns' reports in one round trip; one for a replica the pin is not on changes nothing.
    assert await a.tables.report(
        [
            Report("main-1", "r1:1", 31_000, ("img",), "head-1"),
            Report("main-1", "r2:1", 99_000, (), None),
        ]
    )

    pinned = await b.tables.fetch("main-1", "s1", "head-1", REPLICAS)
    assert pinned is not None
    assert pinned.pin is not None
    assert (pinned.pin.replica, pinned.pin.last_prompt_tokens) == ("r1:1", 31_000)
    assert pinned.pin.images == ("img",)
    assert pinned.session is None  # a pinned turn needs no session

    # A fetch carries the reports waiting, and writes them before it reads.
    carried = await b.tables.fetch(
        "main-1", None, None, REPLICAS, reports=[Report("main-1", "r1:1", 32_000, (), None)]
    )
    assert carried is not None
    assert carried.pin is not None
    assert carried.pin.last_prompt_tokens == 32_000

    new = await b.tables.fetch("title-1", "s1", "head-1", REPLICAS)
    assert new is not None
    assert new.pin is None
    assert new.session is not None
    assert (new.session.main, new.session.main_head, new.session.replica) == (
        "main-1",
        "head-1",
        "r1:1",
    )
    assert new.main_pin is not None
    assert new.main_pin.replica == "r1:1"
    assert [replica for replica, _ in new.heads] == ["r1:1"]
    assert counted(new)["r1:1"][0] == 1
    assert counted(new)["r0:1"] == (0, 0)


async def test_a_pinned_turn_skips_the_counting_unless_it_may_place(
    pair: tuple[Gateway, Gateway],
) -> None:
    a, _ = pair
    await a.tables.claim(new_pin("k", "r1:1"))
    pinned = await a.tables.fetch("k", None, None, REPLICAS, count=False)
    assert pinned is not None
    assert pinned.counts is None
    # Its replica is not usable (not listed): the pick fails it over, so it counts.
    failing = await a.tables.fetch("k", None, None, ("r0:1", "r2:1"), count=False)
    assert counted(failing) == {"r0:1": (0, 0), "r2:1": (0, 0)}
    # A lineage with no pin is placed: counted.
    assert counted(await a.tables.fetch("new", None, None, REPLICAS, count=False))["r1:1"] == (1, 1)


async def test_budget_counts_are_shared(pair: tuple[Gateway, Gateway]) -> None:
    """pins.py's charged counts, fleet-wide: live lineages plus checkpoints left behind that are
    no older than the oldest live lineage there. Scores are the store's milliseconds, so the
    steps are a few apart."""
    a, b = pair

    async def step(claim: Claim) -> None:
        await asyncio.sleep(0.005)
        assert await (a if claim.key != "moving" else b).tables.claim(claim) is not None

    await step(new_pin("old", "r0:1"))
    await step(new_pin("anchor", "r1:1"))
    await step(new_pin("moving", "r0:1"))
    await step(Claim("side", "r0:1", "side", 0, (), "nx"))
    # b spills "moving" to r1: r0 stays charged for the checkpoint it left.
    await step(Claim("moving", "r1:1", "main", 0, (), "move", expected="r0:1", leave_behind=True))
    snapshot = await a.tables.fetch("nothing", None, None, REPLICAS)
    assert snapshot is not None
    assert counted(snapshot)["r0:1"] == (1, 3)  # old live; side and moving left behind
    assert counted(snapshot)["r1:1"] == (2, 2)
    # Once a turn of "old" ends (its report touches it), what was left before is next to go.
    await asyncio.sleep(0.005)
    await b.tables.report([Report("old", "r0:1", 5000, (), None)])
    snapshot = await a.tables.fetch("nothing", None, None, REPLICAS)
    assert snapshot is not None
    assert counted(snapshot)["r0:1"] == (1, 1)

    # A retired lineage (compaction) stops being live; its checkpoint stays charged while
    # "anchor", older, is pinned there.
    await step(new_pin("restarted", "r2:1", retired=("moving",)))
    snapshot = await b.tables.fetch("nothing", None, None, REPLICAS)
    assert snapshot is not None
    assert counted(snapshot)["r1:1"] == (1, 2)
    assert await b.store.client.exists(b.store.key("pin", "moving")) == 0


async def test_every_key_has_an_idle_ttl_and_expires(redis_server: RedisProc) -> None:
    routing = RoutingSettings(pin_idle_ttl_s=0.4, head_idle_ttl_s=0.3)
    gw = Gateway(redis_server.url, routing)
    try:
        await gw.tables.claim(new_pin("k", "r0:1", session=SessionWrite("s", "k", None, True)))
        await gw.tables.claim(Claim("k", "r1:1", "main", 0, (), "move", "r0:1", True))
        await gw.tables.report([Report("k", "r1:1", 5000, (), "h")])
        client = gw.store.client
        found = await client.keys(gw.store.key("*"))
        keys = sorted(k.decode() if isinstance(k, bytes) else k for k in found)
        assert keys == [
            gw.store.key(*parts)
            for parts in (
                ("head", "h"),
                ("left", "r0:1"),
                ("left", "r1:1"),
                ("live", "r1:1"),
                ("pin", "k"),
                ("session", "s"),
            )
        ]
        for key in keys:
            ttl = await client.pttl(key)
            assert 0 < ttl <= 400, (key, ttl)
        await asyncio.sleep(0.5)
        assert await client.keys(gw.store.key("*")) == []
    finally:
        await gw.store.close()


async def test_sets_are_trimmed_to_the_pin_table_size(redis_server: RedisProc) -> None:
    gw = Gateway(redis_server.url, RoutingSettings(pin_table_size=5))
    try:
        for i in range(12):
            await gw.tables.claim(new_pin(f"k{i}", "r0:1"))
            await gw.tables.claim(Claim(f"side{i}", "r0:1", "side", 0, (), "nx"))
        assert await gw.store.client.zcard(gw.store.key("live", "r0:1")) == 5
        assert await gw.store.client.zcard(gw.store.key("left", "r0:1")) == 5
    finally:
        await gw.store.close()


async def test_one_gateway_of_the_fleet_warms_a_head_on_a_replica(
    pair: tuple[Gateway, Gateway],
) -> None:
    """gateway.routing.warm: the first gateway to ask warms the head there; the other does
    not, on that replica, until the claim's TTL (routing.head_idle_ttl_s) lapses. A warm's
    report (no lineage, only the head) tells the other gateway where the head is."""
    a, b = pair
    assert await a.tables.claim_warm("head-1", "r1:1")
    assert not await b.tables.claim_warm("head-1", "r1:1")
    assert not await a.tables.claim_warm("head-1", "r1:1")
    assert await b.tables.claim_warm("head-1", "r2:1")
    ttl = await a.store.client.pttl(a.store.key("warm", "head-1:r1:1"))
    assert 0 < ttl <= 30_000
    assert await a.tables.report([Report(None, "r1:1", 0, (), "head-1")])
    seen = await b.tables.fetch("new-1", "s9", "head-1", REPLICAS)
    assert seen is not None
    assert [replica for replica, _ in seen.heads] == ["r1:1"]
