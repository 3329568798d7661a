"""Two gateways' pickers (gateway.routing.fleet) sharing one real redis-server: a session's turns
alternating between them keep their replica and are verified against the other gateway's
prompt tokens; the loser of a race for a new lineage adopts the winner's replica; a store that
dies, pauses or is cut off costs only what local state cannot know, and what each gateway did
meanwhile is written back (the latest turn decides); the budgets count every gateway's
sessions."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import redis.asyncio

from bench.procs import RedisProc, free_port, start_redis
from gateway.observability.metrics import Metrics
from gateway.routing import Outcome, Replica, RequestContext
from gateway.routing.affinity import AffinityPick
from gateway.routing.fleet import FleetPicker
from gateway.routing.shared_tables import (
    Claim,
    Claimed,
    Report,
    SharedRoutingTables,
    Snapshot,
)
from gateway.settings import RoutingSettings, SharedStateSettings
from gateway.shared_state import SharedStore

NAMES = ("r0:1", "r1:1", "r2:1")


class Gateway:
    def __init__(self, url: str, timeout_s: float = 0.5, **routing: Any) -> None:
        self.replicas = [Replica(name=n, base_url=f"http://{n}", healthy=True) for n in NAMES]
        self.metrics = Metrics(process_metrics=False)
        self.store = SharedStore(
            url, SharedStateSettings(timeout_s=timeout_s, retry_s=0.05), self.metrics
        )
        settings = RoutingSettings.model_validate(routing)
        self.tables = SharedRoutingTables(self.store, settings)
        self.outcomes: Counter[str] = Counter()
        self.claims: Counter[str] = Counter()
        self.picker = FleetPicker(
            self.replicas,
            settings,
            lambda outcome, kind: self.outcomes.update([outcome]),
            self.tables,
            claimed=lambda result: self.claims.update([result]),
            max_pending_writes=8,
            write_skipped=lambda: None,
            report_delay_s=0.001,
        )
        self._rid = 0

    def ctx(self, session: str, lineage: str | None = None, **fields: Any) -> RequestContext:
        self._rid += 1
        return RequestContext(f"{id(self)}-{self._rid}", session, "p", lineage=lineage, **fields)

    async def turn(
        self, session: str, prompt_tokens: int, cached: int, lineage: str | None = None
    ) -> Replica:
        c = self.ctx(session, lineage)
        replica = (await self.picker.route(c)).replica
        self.picker.report(
            c, replica, Outcome.OK, prompt_tokens=prompt_tokens, cached_tokens=cached
        )
        await self.picker.settle()  # the turn's fetch (sent behind a pinned turn) answered
        await self.picker.write_back.settle()  # the report's write has landed
        return replica

    async def close(self) -> None:
        await self.picker.aclose()
        await self.store.close()

    def replica(self, name: str) -> Replica:
        return next(r for r in self.replicas if r.name == name)

    async def written_back(self) -> None:
        """Until the pins made while the store was away are in the store."""
        for _ in range(100):
            if not len(self.picker.write_back):
                return
            await asyncio.sleep(0.02)
        raise AssertionError("unsent pins were not written")


async def until_up(store: SharedStore) -> None:
    for _ in range(50):
        await asyncio.sleep(store.settings.retry_s)
        if await store.run("ping", lambda r: r.ping()) is not None:
            return
    raise AssertionError("the store did not come back")


@pytest.fixture
async def two(redis_server: RedisProc) -> AsyncIterator[tuple[Gateway, Gateway]]:
    a, b = Gateway(redis_server.url), Gateway(redis_server.url)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def test_turns_alternating_between_gateways_keep_their_replica(
    two: tuple[Gateway, Gateway],
) -> None:
    a, b = two
    sessions = [f"s{i}" for i in range(12)]
    homes = {s: await a.turn(s, 10_000, 0) for s in sessions}
    for n in range(1, 5):
        gw = (a, b)[n % 2]
        for s in sessions:
            # The engine cached the previous turn's prompt: a hit only if verification expects
            # what the other gateway reported.
            replica = await gw.turn(s, 10_000 + 1000 * n, 10_000 + 1000 * (n - 1))
            assert replica.name == homes[s].name
    assert a.outcomes["new"] == len(sessions)
    assert b.outcomes["new"] == 0
    assert a.outcomes["hit"] + b.outcomes["hit"] == 4 * len(sessions)
    # Had b expected less (0: it never saw a report), a short cache would still pass; so the
    # store's tokens are what it verifies against: one cached token short is a miss.
    replica = await b.turn(sessions[0], 20_000, 13_000 - 1)
    assert replica.name == homes[sessions[0]].name
    assert b.outcomes["verified_miss"] == 1
    # Both count the fleet's sessions against the budgets.
    live = sum(a.picker.live_sessions(r) for r in a.replicas)
    assert live == sum(b.picker.live_sessions(r) for r in b.replicas) == len(sessions)


class Forced(SharedRoutingTables):
    """Tables whose fetch and claim the test orders: gateway b fetches, gateway a claims,
    then b claims."""

    def __init__(self, inner: SharedRoutingTables) -> None:
        self.inner = inner
        self.fetched = asyncio.Event()
        self.go = asyncio.Event()

    async def fetch(
        self,
        key: str,
        session: str | None,
        head: str | None,
        replicas: Sequence[str],
        *,
        count: bool = True,
        reports: Sequence[Report] = (),
    ) -> Snapshot | None:
        found = await self.inner.fetch(key, session, head, replicas, count=count, reports=reports)
        self.fetched.set()
        return found

    async def claim(self, claim: Claim, replicas: Sequence[str] = ()) -> Claimed | None:
        await self.go.wait()
        return await self.inner.claim(claim, replicas)


async def test_the_loser_of_a_race_for_a_new_lineage_adopts_the_winners_replica(
    two: tuple[Gateway, Gateway],
) -> None:
    a, b = two
    forced = b.picker._tables = Forced(b.tables)
    # b would place the session elsewhere than a (say its view of the loads differs).
    first = a.picker._placement

    def elsewhere(key: str, usable: list[Replica], affinity: str) -> Replica:
        chosen = first(key, usable, affinity)
        return next(r for r in usable if r.name != chosen.name)

    b.picker._placement = elsewhere  # type: ignore[method-assign]
    ctx_b = b.ctx("raced")
    racing = asyncio.create_task(b.picker.route(ctx_b))
    await forced.fetched.wait()
    won = await a.picker.route(a.ctx("raced"))
    forced.go.set()
    lost: AffinityPick = await racing
    assert lost.replica.name == won.replica.name
    assert (a.claims["won"], b.claims["adopted"]) == (1, 1)
    # b's own tables follow: its next turn is pinned there.
    b.picker._tables = b.tables
    assert (await b.turn("raced", 2000, 0)).name == won.replica.name
    assert b.picker.pins.live(won.replica.name) == 1


async def test_a_store_that_dies_and_comes_back(redis_server: RedisProc) -> None:
    a, b = Gateway(redis_server.url), Gateway(redis_server.url)
    try:
        known = [f"k{i}" for i in range(6)]
        homes = {s: (await a.turn(s, 8000, 0)).name for s in known}
        for s in known:
            assert (await b.turn(s, 9000, 8000)).name == homes[s]

        redis_server.kill()
        # Every request is routed; sessions both gateways have seen stay where they were.
        for s in known:
            assert (await a.turn(s, 10_000, 9000)).name == homes[s]
        unknown = await a.turn("during", 8000, 0)
        assert a.claims["unsent"] == 1
        assert a.metrics.registry.get_sample_value("flashbox_state_up") == 0

        back = start_redis(port=redis_server.port)
        try:
            # Each gateway's pooled connection to the old server fails once, and the store is
            # skipped for retry_s after it; then round trips succeed again.
            await until_up(a.store)
            await until_up(b.store)
            # a writes the pin it made meanwhile without waiting for its next turn: b, which
            # never saw that lineage, finds it.
            await a.written_back()
            assert (await b.turn("during", 9000, 8000)).name == unknown.name
            # The restarted store lacks the pins made before: each gateway that knows one
            # writes it back on the lineage's next turn.
            for s in known:
                assert (await b.turn(s, 11_000, 10_000)).name == homes[s]
            assert b.claims["won"] == len(known)
            for s in known:
                assert (await a.turn(s, 12_000, 11_000)).name == homes[s]
            assert a.outcomes["verified_miss"] + b.outcomes["verified_miss"] == 0
        finally:
            back.stop()
    finally:
        await a.close()
        await b.close()


async def test_a_pin_moved_while_the_store_was_away_is_written_back(
    redis_server: RedisProc,
) -> None:
    """The store does not answer for a while (paused, not restarted: it still holds the old
    pin); a fails a lineage over meanwhile; once the store answers, a's move is written, and b
    follows it instead of the pin it knew."""
    a, b = Gateway(redis_server.url, timeout_s=0.05), Gateway(redis_server.url)
    admin = redis.asyncio.from_url(redis_server.url)
    try:
        home = (await a.turn("m", 8000, 0)).name
        assert (await b.turn("m", 9000, 8000)).name == home
        await admin.client_pause(400)
        a.replica(home).healthy = False
        moved = (await a.turn("m", 10_000, 9000)).name
        assert moved != home
        assert a.claims["unsent"] == 1
        await a.written_back()
        assert (await b.turn("m", 11_000, 10_000)).name == moved
        assert b.outcomes["hit"] == 2  # verified against a's 10,000 tokens there
        assert b.outcomes["verified_miss"] == 0
    finally:
        await admin.aclose()
        await a.close()
        await b.close()


async def test_the_budgets_count_every_gateways_sessions(
    redis_server: RedisProc, caplog: pytest.LogCaptureFixture
) -> None:
    """16 slots and 2 running make a budget of 14 a replica: two gateways placing 42 sessions
    between them fill each replica, and the next one either places is over budget (with local
    counts alone each would see 21 sessions and room for 21 more)."""
    args = {"checkpoint_slots": 16, "max_running_requests": 2}
    a, b = Gateway(redis_server.url, **args), Gateway(redis_server.url, **args)
    try:
        for i in range(42):
            await (a, b)[i % 2].turn(f"n{i}", 4000, 0)
        assert [b.picker.live_sessions(r) for r in b.replicas] == [14, 14, 14]
        with caplog.at_level("INFO", logger="gateway.routing.affinity"):
            await b.turn("one-more", 4000, 0)
        assert any("over budget" in r.getMessage() for r in caplog.records)
    finally:
        await a.close()
        await b.close()


class Link:
    """A TCP forwarder between one gateway and the store, which the test can cut (its
    connections drop, new ones are refused) and heal: a network partition."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def heal(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}


async def test_the_latest_turn_decides_between_pins_made_apart(redis_server: RedisProc) -> None:
    """b, cut off from the store, serves a turn of a lineage it never saw, elsewhere. Once the
    link heals, b's pin is written (its turn came after the store's pin was last used), and a
    follows it to where the latest checkpoint is. Had a served a turn after b's, a's would
    stand."""
    link = Link(redis_server.port)
    await link.heal()
    a, b = Gateway(redis_server.url), Gateway(link.url)
    try:
        await b.turn("warm", 4000, 0)  # b has heard the store's clock
        for lineage, a_turns_after in (("x", False), ("y", True)):
            home = (await a.turn(lineage, 8000, 0)).name
            await link.cut()
            # Turns are seconds apart; a few milliseconds order them beyond the clocks' error.
            await asyncio.sleep(0.02)
            b.replica(home).healthy = False  # so b, not knowing the lineage, places it elsewhere
            away = (await b.turn(lineage, 9000, 0)).name
            b.replica(home).healthy = True
            assert away != home
            if a_turns_after:
                await asyncio.sleep(0.02)
                assert (await a.turn(lineage, 9500, 0)).name == home
            await link.heal()
            await b.written_back()
            latest = home if a_turns_after else away
            assert (await a.turn(lineage, 10_000, 0)).name == latest
            assert (await b.turn(lineage, 11_000, 0)).name == latest
    finally:
        await link.cut()
        await a.close()
        await b.close()


async def test_concurrent_new_sessions_spread_as_in_process(redis_server: RedisProc) -> None:
    """New sessions routed at once through one gateway of a fleet: the placements whose claims
    are still on their way count in every pick made meanwhile (a fetch answered before they
    land does not know them), so bounded loads spread them exactly as in process."""
    args = {"checkpoint_slots": 16, "max_running_requests": 2}
    a = Gateway(redis_server.url, **args)
    try:
        await a.picker.prepare()
        picks = await asyncio.gather(*(a.picker.route(a.ctx(f"c{i}")) for i in range(42)))
        spread = Counter(p.replica.name for p in picks)
        assert sorted(spread.values()) == [14, 14, 14], spread
    finally:
        await a.close()
