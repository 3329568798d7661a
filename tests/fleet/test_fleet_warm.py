"""Head warming in a fleet (gateway.routing.warm with gateway.routing.fleet): two gateways'
pickers on one real redis-server both see a head missing on two replicas; each replica gets
one warm, and the other gateway learns where it went from the store."""

from __future__ import annotations

import asyncio
from typing import Any

from bench.procs import RedisProc
from gateway.routing import Replica
from gateway.routing.warm import HeadWarmer
from tests.fleet.test_fleet_picker import Gateway


async def test_each_replica_is_warmed_once_by_the_fleet(redis_server: RedisProc) -> None:
    a, b = Gateway(redis_server.url, timeout_s=2.0), Gateway(redis_server.url, timeout_s=2.0)
    sent: list[str] = []

    async def prefill(replica: Replica, body: dict[str, Any]) -> dict[str, Any]:
        sent.append(replica.name)
        return {"cached_tokens": 0}

    warmers = []
    try:
        for gw in (a, b):
            await gw.picker.prepare()
            # As after a verified head_hit on the first replica.
            gw.picker.heads_restored = True
            gw.picker.heads.put("head-1", gw.replicas[0].name, gw.picker._clock())
            warmer = HeadWarmer(gw.picker, prefill, gw.picker._settings, lambda _o: None)
            warmer.offer("head-1", "SYSTEM AND TOOLS", 30_000)
            warmers.append(warmer)
        for warmer in warmers:
            warmer.sweep()
        for _ in range(500):
            await asyncio.sleep(0.01)
            if not any(w._warming for w in warmers):
                break
        others = sorted(r.name for r in a.replicas[1:])
        assert sorted(sent) == others
        # The warms' reports reach the store; a new lineage's fetch at either gateway then
        # sees the head on every replica.
        await a.picker.write_back.settle()
        await b.picker.write_back.settle()
        snapshot = await b.tables.fetch("new-1", "s1", "head-1", [r.name for r in b.replicas])
        assert snapshot is not None
        assert sorted(replica for replica, _ in snapshot.heads) == others
        # Neither gateway tries again where the other one warmed.
        for warmer in warmers:
            warmer.sweep()
        await asyncio.sleep(0.05)
        assert sorted(sent) == others
    finally:
        for warmer in warmers:
            await warmer.stop()
        await a.close()
        await b.close()
