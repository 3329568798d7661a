"""A shared head from the third session on (gateway.routing.affinity with gateway.routing.warm):
while the warms that spread a head to the other replicas run (a head's whole prefill, ~22 s at
30k), its one holder takes the project's new sessions past its share if it idles, instead of
sending the fourth cold."""

from __future__ import annotations

import asyncio

from gateway.routing import Outcome
from gateway.routing.warm import HeadWarmer
from tests.gateway.routing.test_lineages import Rig
from tests.gateway.routing.test_warm import HEAD, Engine, settle, warmer_for

PLAIN = {"head": "cc-head", "head_tokens": 30_100}


def sessions(rig: Rig, warmer: HeadWarmer | None, run: int) -> list[str]:
    """Six new sessions of one project, one after another, as run.py sends them: the first
    without the head field (not yet shared), the rest with it, each offered to the warmer
    before it is placed. Their affinities."""
    affinities = []
    for n in range(6):
        fields = PLAIN if n == 0 else HEAD
        if warmer is not None and n > 0:
            warmer.offer("cc-head", "SYSTEM AND TOOLS", 30_100)
        c = rig.ctx(f"run{run}-s{n}", f"run{run}-s{n}-main", **fields)
        pick = rig.picker.pick(c)
        cached = 29_952 if pick.affinity == "head" else 0
        rig.picker.report(c, pick.replica, Outcome.OK, prompt_tokens=31_000, cached_tokens=cached)
        rig.clock.now += 1
        affinities.append(pick.affinity)
    return affinities


async def test_every_session_from_the_third_restores_the_head_while_it_is_warmed() -> None:
    for run in range(30):  # keys that hash every way over three replicas
        rig, engine = Rig(), Engine()
        engine.gate = asyncio.Event()  # every warm still running
        warmer, _ = warmer_for(rig, engine)
        affinities = sessions(rig, warmer, run)
        warmer.sweep()
        assert affinities == ["new", "new"] + ["head"] * 4, (run, affinities)
        engine.gate.set()
        await settle(warmer)


def test_without_warming_a_holder_past_its_share_sends_the_session_cold() -> None:
    """Nothing will spread the head: a cold session elsewhere saves it there too, as before
    (the balance test in test_lineages.py)."""
    runs = [sessions(Rig(), None, run) for run in range(30)]
    assert all(a[:3] == ["new", "new", "head"] for a in runs)
    assert any("new" in a[3:] for a in runs)
