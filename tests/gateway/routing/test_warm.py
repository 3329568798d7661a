"""Head warming (gateway.routing.warm with gateway.routing.affinity): a head that sessions
restore is prefilled on the replicas that lack it while they idle, and never where it would be
wasted. The engine's /generate is an injected coroutine here; tests/e2e/test_head_warm.py runs
it against real simulators."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from gateway.errors import UpstreamError
from gateway.routing import Outcome, Replica
from gateway.routing.warm import HeadWarmer
from tests.gateway.routing.test_lineages import Rig

HEAD = {"head": "cc-head", "head_tokens": 30_100, "save_head": True}


class Engine:
    """Records each warm's body; answers at once, or when `gate` opens, or with an error."""

    def __init__(self, fail: bool = False) -> None:
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self.gate: asyncio.Event | None = None
        self.fail = fail

    async def prefill(self, replica: Replica, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append((replica.name, body))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise UpstreamError("The engine answered 500: boom")
        return {"prompt_tokens": 30_100, "cached_tokens": 0}


def warmer_for(rig: Rig, engine: Engine) -> tuple[HeadWarmer, Counter[str]]:
    counted: Counter[str] = Counter()
    settings = rig.picker._settings
    return HeadWarmer(rig.picker, engine.prefill, settings, lambda o: counted.update([o])), counted


def restored_once(rig: Rig) -> Replica:
    """Two sessions of one project: the first saves the head, the second restores it (a
    verified head_hit, so the engine is known to keep heads)."""
    saver = rig.turn("s1", "s1-main", 31_000, 0, **HEAD)
    c = rig.ctx("s2", "s2-main", **HEAD)
    pick = rig.picker.pick(c)
    assert (pick.replica, pick.affinity) == (saver, "head")
    rig.picker.report(c, pick.replica, Outcome.OK, prompt_tokens=31_000, cached_tokens=29_952)
    rig.clock.now += 1
    assert rig.picker.heads_restored
    return saver


async def settle(warmer: HeadWarmer) -> None:
    for _ in range(5):
        await asyncio.sleep(0)
    while warmer._warming:
        await asyncio.gather(*warmer._warming.values(), return_exceptions=True)


async def test_a_restored_head_is_prefilled_on_every_idle_replica_that_lacks_it() -> None:
    rig, engine = Rig(), Engine()
    warmer, counted = warmer_for(rig, engine)
    saver = restored_once(rig)
    others = {r.name for r in rig.replicas if r is not saver}
    for name in others:  # a session there whose checkpoint is older than the warm's
        rig.picker.pins.put(f"on-{name}", name, rig.clock.now - 10, kind="main")
    warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    assert warmer.sweep() == 2
    await settle(warmer)
    assert {name for name, _ in engine.bodies} == others
    _, body = engine.bodies[0]
    # Prefill only (SGLang's own way to fill its prefix cache), with the head declared so the
    # patched engine checkpoints it.
    assert body["text"] == "SYSTEM AND TOOLS"
    assert body["sampling_params"] == {
        "max_new_tokens": 0,
        "custom_params": {"flashbox_head_tokens": 30_100},
    }
    assert counted == {"saved": 2}
    now = rig.clock.now
    assert set(rig.picker.heads.replicas("cc-head", now)) == {r.name for r in rig.replicas}
    # Each warmed head is charged to its replica's budget, like one a session saved there:
    # it outlives the older session's checkpoint under LRU.
    for name in others:
        assert rig.picker.pins.charged(name) == 2
    # Nothing is left to warm, and the queue estimates are back to empty.
    assert warmer.sweep() == 0
    assert all(r.prefill_s == 0 for r in rig.replicas)


async def test_a_new_session_then_restores_the_head_on_an_idle_replica_not_behind_a_queue() -> None:
    rig, engine = Rig(), Engine()
    warmer, _ = warmer_for(rig, engine)
    saver = restored_once(rig)
    warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    warmer.sweep()
    await settle(warmer)
    saver.prefill_s = 12.0  # another session's turn is prefilling there
    c = rig.ctx("s3", "s3-main", **HEAD)
    pick = rig.picker.pick(c)
    assert pick.affinity == "head"
    assert pick.replica is not saver


async def test_nothing_is_warmed_before_the_engine_restored_a_head() -> None:
    """The stock engine ignores the head field: a warm there is a wasted prefill."""
    rig, engine = Rig(), Engine()
    warmer, _ = warmer_for(rig, engine)
    rig.turn("s1", "s1-main", 31_000, 0, **HEAD)
    warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    assert not rig.picker.heads_restored
    assert warmer.sweep() == 0
    assert engine.bodies == []


async def test_a_busy_replica_is_warmed_only_once_its_queue_empties() -> None:
    rig, engine = Rig(), Engine()
    warmer, _ = warmer_for(rig, engine)
    saver = restored_once(rig)
    busy, idle = [r for r in rig.replicas if r is not saver]
    busy.prefill_s = 20.0
    warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    assert warmer.sweep() == 1
    await settle(warmer)
    assert [name for name, _ in engine.bodies] == [idle.name]
    busy.prefill_s = 0.0
    assert warmer.sweep() == 1
    await settle(warmer)
    assert [name for name, _ in engine.bodies] == [idle.name, busy.name]


async def test_a_warm_in_progress_counts_in_the_replicas_queue_and_is_not_doubled() -> None:
    rig, engine = Rig(), Engine()
    engine.gate = asyncio.Event()
    warmer, _ = warmer_for(rig, engine)
    saver = restored_once(rig)
    warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    warmer.offer("other-head", "ANOTHER PROJECT", 20_000)
    assert warmer.sweep() == 2
    await asyncio.sleep(0)
    others = [r for r in rig.replicas if r is not saver]
    # A pick meanwhile sees the warm's cold prefill queued there.
    assert all(r.prefill_s > 20 for r in others)
    assert warmer.sweep() == 0
    engine.gate.set()
    await settle(warmer)
    assert len(engine.bodies) == 2


async def test_a_failed_warm_is_counted_and_the_replica_does_not_hold_the_head() -> None:
    rig, engine = Rig(), Engine(fail=True)
    warmer, counted = warmer_for(rig, engine)
    saver = restored_once(rig)
    warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    warmer.sweep()
    await settle(warmer)
    assert counted == {"failed": 2}
    assert rig.picker.heads.replicas("cc-head", rig.clock.now) == [saver.name]
    assert all(r.prefill_s == 0 for r in rig.replicas)


async def test_one_replica_or_a_head_held_nowhere_warms_nothing() -> None:
    rig, engine = Rig(n=1), Engine()
    warmer, _ = warmer_for(rig, engine)
    rig.turn("s1", "s1-main", 31_000, 0, **HEAD)
    rig.turn("s2", "s2-main", 31_000, 29_952, **HEAD)
    assert rig.picker.heads_restored
    warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    assert warmer.sweep() == 0
    # Its sessions stopped: past routing.head_idle_ttl_s the head is held nowhere.
    rig3 = Rig()
    warmer3, _ = warmer_for(rig3, engine)
    restored_once(rig3)
    rig3.clock.now += rig3.picker._settings.head_idle_ttl_s + 1
    warmer3.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    assert warmer3.sweep() == 0
    assert engine.bodies == []


async def test_a_replica_without_room_in_its_budget_is_not_warmed() -> None:
    rig, engine = Rig(checkpoint_slots=20, max_running_requests=16), Engine()
    warmer, _ = warmer_for(rig, engine)
    saver = restored_once(rig)
    full = next(r for r in rig.replicas if r is not saver)
    # The budget with 20 slots and 16 running: (20 - 16 - 1) + 1 = 4 sessions.
    for i in range(4):
        rig.picker.pins.put(f"x{i}", full.name, rig.clock.now, kind="main")
    warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    warmer.sweep()
    await settle(warmer)
    assert full.name not in {name for name, _ in engine.bodies}
    assert len(engine.bodies) == 1


@pytest.mark.parametrize(
    "settings", [{"policy": "round_robin"}, {"head_warm": False}, {"prompt_heads": False}]
)
async def test_warming_is_off_with_another_policy_or_when_turned_off(
    settings: dict[str, Any],
) -> None:
    rig, engine = Rig(**settings), Engine()
    warmer, _ = warmer_for(rig, engine)
    rig.picker.heads_restored = True
    rig.picker.heads.put("cc-head", rig.replicas[0].name, rig.clock.now)
    warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    warmer.start()
    assert warmer.sweep() == 0
    await warmer.stop()
    assert engine.bodies == []


async def test_the_loop_warms_an_offered_head_and_stops_cleanly() -> None:
    rig, engine = Rig(head_warm_check_s=0.01), Engine()
    engine.gate = asyncio.Event()
    warmer, _ = warmer_for(rig, engine)
    restored_once(rig)
    warmer.start()
    warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
    for _ in range(100):
        if len(engine.bodies) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(engine.bodies) == 2
    # Stopping cancels warms in progress and gives their queued prefill back.
    await warmer.stop()
    assert all(r.prefill_s == 0 for r in rig.replicas)
