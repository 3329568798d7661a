"""A fleet's pinned turn goes to its replica before the store answers (gateway.routing.fleet),
only while the gateway would have heard of a move (gateway.routing.moves): two gateways' pickers
on one real redis-server."""

from __future__ import annotations

import asyncio

import redis.asyncio

from bench.procs import RedisProc
from gateway.routing import Outcome
from gateway.routing.pins import Pin
from tests.fleet.test_fleet_picker import Gateway


async def until(check: object, what: str) -> None:
    for _ in range(1000):  # 10 s: a loaded CI box
        if callable(check) and check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting: {what}")


def pin_of(gw: Gateway, session: str) -> Pin:
    ctx = gw.ctx(session)
    assert ctx.key is not None
    pin = gw.picker.pins.peek(ctx.key)
    assert pin is not None
    return pin


async def test_a_confirmed_pinned_turn_is_sent_while_the_store_does_not_answer(
    redis_server: RedisProc,
) -> None:
    a = Gateway(redis_server.url, timeout_s=2.0)
    admin = redis.asyncio.from_url(redis_server.url)
    try:
        await a.picker.prepare()
        await until(lambda: a.picker._watch.live, "the move watch subscribed")
        home = (await a.turn("s", 8000, 0)).name
        assert pin_of(a, "s").confirmed == a.picker._watch.epoch
        await admin.client_pause(300)
        # The route returns with its fetch still waiting on the paused store: it did not wait.
        ctx = a.ctx("s")
        pick = await a.picker.route(ctx)
        assert (pick.replica.name, pick.affinity) == (home, "pinned")
        assert ctx.request_id in a.picker._confirming
        assert not a.picker._confirming[ctx.request_id].done()
        # The turn ends before the store answers: verified once it has.
        a.picker.report(ctx, pick.replica, Outcome.OK, prompt_tokens=9000, cached_tokens=7936)
        assert a.outcomes["hit"] == 0
        await a.picker.settle()
        assert a.outcomes["hit"] == 1
    finally:
        await admin.aclose()
        await a.close()


async def test_with_pinned_turns_wait_the_turn_waits_for_the_fetch(
    redis_server: RedisProc,
) -> None:
    a = Gateway(redis_server.url, timeout_s=2.0)
    a.picker._pinned_turns_wait = True
    admin = redis.asyncio.from_url(redis_server.url)
    try:
        await a.picker.prepare()
        await until(lambda: a.picker._watch.live, "the move watch subscribed")
        await a.turn("s", 8000, 0)
        await admin.client_pause(100)
        ctx = a.ctx("s")
        await a.picker.route(ctx)
        assert ctx.request_id not in a.picker._confirming
    finally:
        await admin.aclose()
        await a.close()


async def test_a_move_by_another_gateway_makes_the_next_turn_here_wait_and_follow_it(
    redis_server: RedisProc,
) -> None:
    a, b = Gateway(redis_server.url), Gateway(redis_server.url)
    try:
        for gw in (a, b):
            await gw.picker.prepare()
            await until(lambda gw=gw: gw.picker._watch.live, "the move watch subscribed")
        home = (await a.turn("m", 8000, 0)).name
        assert (await b.turn("m", 9000, 8000)).name == home
        assert (await a.turn("m", 10_000, 9000)).name == home
        assert pin_of(a, "m").confirmed
        # b fails the lineage over (it sees home down; a does not).
        b.replica(home).healthy = False
        moved = (await b.turn("m", 11_000, 0)).name
        assert moved != home
        await until(lambda: not pin_of(a, "m").confirmed, "a heard the move")
        # a's next turn waits for the store and goes where b put it, verified against b's turn.
        assert (await a.turn("m", 12_000, 11_000)).name == moved
        assert a.outcomes["moved"] == 0
        assert a.outcomes["hit"] == 2
        assert a.outcomes["verified_miss"] == 0
    finally:
        await a.close()
        await b.close()


async def test_a_move_never_heard_costs_one_turn_counted_as_moved(
    redis_server: RedisProc,
) -> None:
    """A pin rewritten without the move published (by hand, or a gateway from before the move
    watch): the turn already sent went to the old replica; it is counted as moved, not
    verified, and the store's pin is adopted, so the next turn goes there."""
    a = Gateway(redis_server.url)
    admin = redis.asyncio.from_url(redis_server.url)
    try:
        await a.picker.prepare()
        await until(lambda: a.picker._watch.live, "the move watch subscribed")
        home = (await a.turn("m", 8000, 0)).name
        other = next(r.name for r in a.replicas if r.name != home)
        keys = [k async for k in admin.scan_iter("flashbox:pin:*")]
        assert len(keys) == 1
        await admin.hset(keys[0], "r", other)
        assert (await a.turn("m", 9000, 0)).name == home
        assert a.outcomes["moved"] == 1
        assert a.outcomes["hit"] == a.outcomes["verified_miss"] == 0
        assert (await a.turn("m", 10_000, 0)).name == other
    finally:
        await admin.aclose()
        await a.close()


async def test_after_the_subscription_drops_pinned_turns_wait_until_the_store_confirms_again(
    redis_server: RedisProc,
) -> None:
    a = Gateway(redis_server.url)
    admin = redis.asyncio.from_url(redis_server.url)
    try:
        await a.picker.prepare()
        await until(lambda: a.picker._watch.live, "the move watch subscribed")
        await a.turn("s", 8000, 0)
        first = a.picker._watch.epoch
        ctx = a.ctx("s")
        assert ctx.key is not None
        assert a.picker._sends_before_answer(ctx.key, ())

        def heard() -> float | None:
            return a.metrics.registry.get_sample_value("flashbox_state_moves_heard")

        assert heard() == 1
        await admin.client_kill_filter(_type="pubsub")
        await until(lambda: a.picker._watch.epoch > first, "the watch subscribed again")
        assert heard() == 1
        # Moves published meanwhile were lost: the pin waits for one fetch, then goes first.
        assert not a.picker._sends_before_answer(ctx.key, ())
        await a.turn("s", 9000, 7936)
        assert a.picker._sends_before_answer(ctx.key, ())
        await a.picker.aclose()
        assert heard() == 0
    finally:
        await admin.aclose()
        await a.close()


async def test_a_pinned_turns_fetch_goes_after_its_first_token(redis_server: RedisProc) -> None:
    """Sent beside the prefill, the fetch's answer would take CPU from the first token."""
    a = Gateway(redis_server.url)

    def fetches() -> float:
        found = a.metrics.registry.get_sample_value(
            "flashbox_state_seconds_count", {"op": "routing_fetch"}
        )
        return found or 0.0

    try:
        await a.picker.prepare()
        await until(lambda: a.picker._watch.live, "the move watch subscribed")
        await a.turn("s", 8000, 0)
        before = fetches()
        ctx = a.ctx("s")
        pick = await a.picker.route(ctx)
        assert pick.affinity == "pinned"
        await asyncio.sleep(0.2)  # a prefill: the fetch waits
        assert fetches() == before
        a.picker.first_token(ctx)
        await until(lambda: fetches() == before + 1, "the fetch after the first token")
        a.picker.report(ctx, pick.replica, Outcome.OK, prompt_tokens=9000, cached_tokens=7936)
        await a.picker.settle()
        assert a.outcomes["hit"] == 1
    finally:
        await a.close()
