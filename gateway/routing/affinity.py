"""Checkpoint-aware session affinity: the `flashbox` routing policy, and its baselines.

flashbox: a session's first turn goes to its first rendezvous choice that has room in its
checkpoint budget (gateway.routing.capacity); the pin table sends every later turn back there.
A pin moves only when its replica fails or drains (to the session's next rendezvous choice with
room: "failover") or when waiting there costs more than re-prefilling elsewhere ("spill").
Each pinned turn is verified once it ends: the engine's cached tokens must cover the session's
previous prompt rounded down to the track interval ("hit"), else "verified_miss".

Baselines for the benchmark: consistent_hash (first rendezvous choice, no pins, no capacity)
and round_robin.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from gateway.errors import NoReplicaError
from gateway.routing import capacity
from gateway.routing.picker import Outcome
from gateway.routing.pins import PinTable
from gateway.routing.rendezvous import ranked
from gateway.routing.replica import Replica, RequestContext
from gateway.settings import RoutingSettings

log = logging.getLogger("gateway.routing.affinity")

# flashbox_affinity_total{outcome}: each pinned turn counts once, as hit or verified_miss (or
# unverified when it ended without usage); the other outcomes count when the pick is made.
OUTCOMES = ("hit", "verified_miss", "unverified", "new", "spill", "failover", "unpinned")


@dataclass(frozen=True, slots=True)
class AffinityPick:
    replica: Replica
    affinity: str


@dataclass(frozen=True, slots=True)
class _Pending:
    key: str
    affinity: str
    expected_cached: int


class AffinityPicker:
    def __init__(
        self,
        replicas: Sequence[Replica],
        settings: RoutingSettings,
        count: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._replicas: list[Replica] = []
        self._by_name: dict[str, Replica] = {}
        self._settings = settings
        self._count = count
        self._clock = clock
        self.pins = PinTable(settings.pin_table_size, settings.pin_idle_ttl_s)
        self._pending: dict[str, _Pending] = {}
        self._next = 0
        for replica in replicas:
            self.add(replica)

    @property
    def replicas(self) -> Sequence[Replica]:
        return self._replicas

    def replica(self, name: str) -> Replica | None:
        return self._by_name.get(name)

    def add(self, replica: Replica) -> None:
        """A new replica (static list, or a discovery source): no existing pin moves."""
        if replica.name in self._by_name:
            return
        replica.breaker.configure(self._settings.breaker_failures, self._settings.breaker_open_s)
        self._replicas.append(replica)
        self._by_name[replica.name] = replica

    def live_sessions(self, replica: Replica) -> int:
        self.pins.sweep(self._clock())
        return self.pins.live(replica.name)

    # -- pick ------------------------------------------------------------------------------

    def pick(self, ctx: RequestContext, exclude: Collection[str] = ()) -> AffinityPick:
        now = self._clock()
        usable = [
            r
            for r in self._replicas
            if r.healthy and not r.draining and r.name not in exclude and r.breaker.allows(now)
        ]
        if not usable:
            raise NoReplicaError("No healthy engine replica is available; retry shortly.")
        policy, key = self._settings.policy, ctx.session_key
        if policy == "round_robin" or key is None:
            self._next += 1
            return self._chosen(ctx, usable[self._next % len(usable)], "unpinned", None, now)
        if policy == "consistent_hash":
            return self._chosen(ctx, ranked(key, usable)[0], "unpinned", None, now)
        pin = self.pins.get(key, now)
        if pin is None:
            return self._place(ctx, key, usable, "new", now)
        pinned = self._by_name.get(pin.replica)
        if pinned is None or pinned not in usable:
            return self._place(ctx, key, usable, "failover", now)
        if self._settings.spill:
            target = self._spill_target(ctx, key, pinned, usable)
            if target is not None:
                self.pins.put(key, target.name, now, leaves_checkpoint=True)
                return self._chosen(ctx, target, "spill", None, now)
        interval = capacity.track_interval(pinned, self._settings)
        expected = pin.last_prompt_tokens // interval * interval
        return self._chosen(ctx, pinned, "pinned", _Pending(key, "pinned", expected), now)

    def _place(
        self, ctx: RequestContext, key: str, usable: list[Replica], affinity: str, now: float
    ) -> AffinityPick:
        choices = ranked(key, usable)
        target = next((r for r in choices if self._has_room(r)), None)
        if target is None:
            # Every budget is full: evictions will happen somewhere; spread them evenly.
            target = min(choices, key=self._fill)
        self.pins.put(key, target.name, now)
        return self._chosen(ctx, target, affinity, _Pending(key, affinity, 0), now)

    def _spill_target(
        self, ctx: RequestContext, key: str, pinned: Replica, usable: list[Replica]
    ) -> Replica | None:
        settings = self._settings
        stay = capacity.wait_s(pinned, settings)
        if stay == 0.0:
            return None
        cost = capacity.miss_extra_s(len(ctx.prompt), settings)
        others = [r for r in ranked(key, usable) if r is not pinned and self._has_room(r)]
        if not others:
            return None
        target = min(others, key=lambda r: capacity.wait_s(r, settings))
        if stay > cost + capacity.wait_s(target, settings):
            return target
        return None

    def _has_room(self, replica: Replica) -> bool:
        return self.pins.charged(replica.name) < capacity.session_budget(replica, self._settings)

    def _fill(self, replica: Replica) -> float:
        return self.pins.charged(replica.name) / capacity.session_budget(replica, self._settings)

    def _chosen(
        self,
        ctx: RequestContext,
        replica: Replica,
        affinity: str,
        pending: _Pending | None,
        now: float,
    ) -> AffinityPick:
        replica.breaker.on_pick(now)
        if pending is not None:
            self._pending[ctx.request_id] = pending
        if affinity != "pinned":
            self._count(affinity)
        return AffinityPick(replica, affinity)

    # -- report ----------------------------------------------------------------------------

    def report(
        self,
        ctx: RequestContext,
        replica: Replica,
        outcome: Outcome,
        *,
        prompt_tokens: int = 0,
        cached_tokens: int = 0,
    ) -> None:
        now = self._clock()
        if outcome is Outcome.CONNECT_FAILED:
            # Passive detection: a refused connection means down now, not after the next probe.
            replica.healthy = False
            replica.successes = 0
            replica.breaker.failure(now)
        elif outcome is Outcome.UPSTREAM_ERROR:
            replica.breaker.failure(now)
        elif outcome is Outcome.OK:
            replica.breaker.success()
        pending = self._pending.pop(ctx.request_id, None)
        if pending is None:
            return
        ok = outcome is Outcome.OK and prompt_tokens > 0
        if pending.affinity == "pinned" and outcome is not Outcome.CONNECT_FAILED:
            if not ok:
                self._count("unverified")
            elif cached_tokens >= pending.expected_cached:
                self._count("hit")
            else:
                self._count("verified_miss")
                log.info(
                    "verified miss on %s: session %s cached %d of the %d promised",
                    replica.name,
                    pending.key[:12],
                    cached_tokens,
                    pending.expected_cached,
                )
        pin = self.pins.peek(pending.key)
        if ok and pin is not None and pin.replica == replica.name:
            pin.last_prompt_tokens = prompt_tokens

    def forget(self, ctx: RequestContext) -> None:
        """Drop what pick noted for a request that never reached the engine."""
        self._pending.pop(ctx.request_id, None)
