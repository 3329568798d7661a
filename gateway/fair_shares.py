"""A fleet's fair shares of each replica's running slots, drawn through the shared store.

Each gateway orders its own queue (gateway.fairness), but several gateways in front of one
replica would each fill all of its slots, and the engine would queue the excess in arrival
order again. So with `state_url`, every `fairness.fleet_refresh_s` each gateway writes its
demand on each replica (running + waiting requests by flow) to the store and reads the
others' in the same round trip (a Lua script; an entry older than `fairness.fleet_stale_s`,
a gateway that stopped, is dropped). Every gateway then computes the same allocation:

- the replica's slots go to the flows of the highest priority band first, then the next;
- within a band, weighted max-min (water-filling): each flow gets slots in proportion to its
  weight, a flow wanting less than that gets what it wants, and the rest is shared again;
- a flow's slots are split among the gateways that carry it by their demand.

A gateway's share of the replica is the sum of its flows' slots, rounded up, and at least
one. A gateway with no demand at the exchange gets an even part (among the idle gateways) of
what the others leave, so a burst that arrives before the next exchange is not held to one
slot. Rounding up keeps every slot in use; a replica may then run about one request per
gateway over its slots, queued by the engine, never a flood.

When the store does not answer, the shares are dropped and each gateway fills the replica's
slots alone, as without a store (docs/fairness.md, "A fleet").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Callable, Iterable

from gateway.fairness import FairSlots
from gateway.observability.metrics import Metrics
from gateway.settings import FairnessSettings
from gateway.shared_state import SharedStore

log = logging.getLogger("gateway.fair_shares")

# KEYS: one hash per replica (gateway id -> "<ms> <flow>=<n> ..."). ARGV: this gateway's id,
# the stale bound (ms), then this gateway's demand on each key ("" for none: an idle gateway
# is written too, so the others know how many share what is left). Returns, per key, the other
# gateways' fresh entries; drops the stale ones.
_EXCHANGE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local stale = tonumber(ARGV[2])
local out = {}
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, ARGV[1], now .. ' ' .. ARGV[i + 2])
  local entries = redis.call('HGETALL', key)
  local fresh = {}
  for j = 1, #entries, 2 do
    local at = tonumber(string.match(entries[j + 1], '^(%d+)'))
    if at == nil or now - at > stale then
      redis.call('HDEL', key, entries[j])
    elseif entries[j] ~= ARGV[1] then
      table.insert(fresh, entries[j + 1])
    end
  end
  if redis.call('EXISTS', key) == 1 then
    redis.call('PEXPIRE', key, stale * 4)
  end
  out[i] = fresh
end
return out
"""


def allocate(capacity: int, wanted: dict[str, int], settings: FairnessSettings) -> dict[str, float]:
    """Slots per flow: by priority band, then weighted max-min within a band."""
    given: dict[str, float] = {}
    left = float(capacity)
    bands: dict[int, list[str]] = {}
    for flow, want in wanted.items():
        if want > 0:
            share = settings.keys.get(flow)
            bands.setdefault(share.priority if share is not None else 0, []).append(flow)
    for priority in sorted(bands, reverse=True):
        active = bands[priority]
        while active and left > 1e-9:
            weights = {flow: _weight(settings, flow) for flow in active}
            unit = left / sum(weights.values())
            sated = [flow for flow in active if wanted[flow] <= weights[flow] * unit]
            if not sated:
                for flow in active:
                    given[flow] = weights[flow] * unit
                left = 0.0
                break
            for flow in sated:
                given[flow] = float(wanted[flow])
                left -= wanted[flow]
            active = [flow for flow in active if flow not in sated]
    return given


def _weight(settings: FairnessSettings, flow: str) -> float:
    share = settings.keys.get(flow)
    return share.weight if share is not None else 1.0


def _encode(demand: dict[str, int]) -> str:
    return " ".join(f"{flow}={count}" for flow, count in sorted(demand.items()) if count > 0)


def _decode(entry: str) -> dict[str, int]:
    """An entry "<ms> <flow>=<n> ..." as {flow: n}; what does not parse is skipped."""
    demand: dict[str, int] = {}
    for part in entry.split(" ")[1:]:
        flow, _, count = part.rpartition("=")
        if flow and count.isdigit():
            demand[flow] = int(count)
    return demand


class FleetShares:
    """This gateway's share of each replica's slots, refreshed through the store."""

    def __init__(
        self,
        store: SharedStore,
        settings: FairnessSettings,
        metrics: Metrics,
        replicas: Callable[[], Iterable[str]],
        base_capacity: Callable[[str], int],
    ) -> None:
        self._store = store
        self._settings = settings
        self._metrics = metrics
        self._replicas = replicas
        self._base = base_capacity
        self.gateway_id = uuid.uuid4().hex[:16]
        # replica -> this gateway's slots there (absent: no share known, the whole capacity).
        self._shares: dict[str, int] = {}
        self._slots: FairSlots | None = None
        self._task: asyncio.Task[None] | None = None

    def capacity(self, replica: str) -> int:
        base = self._base(replica)
        share = self._shares.get(replica)
        return base if share is None else min(base, share)

    def attach(self, slots: FairSlots) -> None:
        """The slots whose demand this gateway reports and whose capacity it sets."""
        self._slots = slots

    def start(self) -> None:
        """The refresh loop, the only caller of `refresh` in a gateway (two exchanges at once
        could finish out of order, the older one last)."""
        if self._settings.enabled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="fair-shares")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self._settings.fleet_refresh_s)

    async def refresh(self) -> None:
        """One exchange with the store, and the shares it gives."""
        slots = self._slots
        if slots is None:
            return
        names = sorted(self._replicas())
        if not names:
            return
        demand = slots.demand()
        mine = [_encode(demand.get(name, {})) for name in names]
        keys = [self._store.key("fair", name) for name in names]
        stale_ms = str(int(self._settings.fleet_stale_s * 1000))
        others = await self._store.run(
            "fair_shares",
            lambda client: client.eval(
                _EXCHANGE, len(keys), *keys, self.gateway_id, stale_ms, *mine
            ),
        )
        before = dict(self._shares)
        if not isinstance(others, list) or len(others) != len(names):
            self._shares.clear()  # the store failed: each gateway fills the slots alone
        else:
            for name, entries in zip(names, others, strict=True):
                self._shares[name] = self._share(name, demand.get(name, {}), entries)
        for name in names:
            share = self._shares.get(name)
            self._metrics.child(self._metrics.fair_share_slots, name).set(
                self._base(name) if share is None else share
            )
            if share is None or share > before.get(name, 0):
                slots.capacity_changed(name)

    def _share(self, name: str, mine: dict[str, int], entries: list[bytes | str]) -> int:
        base = self._base(name)
        total = dict(mine)
        idle = 1
        for entry in entries:
            text = entry.decode() if isinstance(entry, bytes) else str(entry)
            demand = _decode(text)
            idle += not demand
            for flow, count in demand.items():
                total[flow] = total.get(flow, 0) + count
        given = allocate(base, total, self._settings)
        if not mine:
            # Nothing here at the exchange: an even part of what the others leave, so a burst
            # that arrives before the next exchange is not held to one slot, and bursts at
            # every idle gateway at once do not each take all of it.
            share = (base - sum(given.values())) / idle
        else:
            share = sum(given.get(flow, 0.0) * n / total[flow] for flow, n in mine.items())
        return max(1, math.ceil(share - 1e-9))
