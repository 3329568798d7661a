"""Checkpoint-aware session affinity: the `flashbox` routing policy, and its baselines.

flashbox: a session's first turn goes to its first rendezvous choice that has room in its
checkpoint budget (gateway.routing.capacity) and is within its share of the sessions (bounded
loads); the pin table sends every later turn back there. A pin moves only when its replica
fails or drains (to the session's next rendezvous choice with room: "failover") or when waiting
there costs more than the misses a move causes, and a replica with a free running slot can take
it ("spill").
Each pinned turn is verified once it ends: the engine's cached tokens must cover the session's
previous prompt rounded down to the track interval ("hit"), else "verified_miss".

Baselines for the benchmark: consistent_hash (first rendezvous choice, no pins, no capacity)
and round_robin.
"""

from __future__ import annotations

import logging
import math
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
                log.info(
                    "spill: session %s from %s to %s (%s)",
                    key[:12],
                    pinned.name,
                    target.name,
                    self._budgets(usable),
                )
                self.pins.put(key, target.name, now, leaves_checkpoint=True)
                # Pending too: its prompt is what the next turn's verification expects there.
                return self._chosen(ctx, target, "spill", _Pending(key, "spill", 0), now)
        interval = capacity.track_interval(pinned, self._settings)
        expected = pin.last_prompt_tokens // interval * interval
        return self._chosen(ctx, pinned, "pinned", _Pending(key, "pinned", expected), now)

    def _place(
        self, ctx: RequestContext, key: str, usable: list[Replica], affinity: str, now: float
    ) -> AffinityPick:
        target = self._placement(key, usable, affinity)
        self.pins.put(key, target.name, now)
        return self._chosen(ctx, target, affinity, _Pending(key, affinity, 0), now)

    def _placement(self, key: str, usable: list[Replica], affinity: str) -> Replica:
        # One replica (one GPU: the usual appliance) leaves nothing to rank or balance.
        choices = usable if len(usable) == 1 else ranked(key, usable)
        roomy = [r for r in choices if self._has_room(r)]
        if not roomy:
            # Every budget is full: evictions will happen somewhere; spread them evenly.
            target = min(choices, key=self._fill)
            log.info(
                "over budget: session %s %s to %s (%s)",
                key[:12],
                affinity,
                target.name,
                self._budgets(usable),
            )
        elif affinity == "new" and len(roomy) > 1:
            target = self._bounded(roomy, usable)
        else:
            # Failover (or the only choice with room): the next rendezvous choice with room, as
            # every gateway would pick it.
            target = roomy[0]
        return target

    def _bounded(self, roomy: list[Replica], usable: list[Replica]) -> Replica:
        """Rendezvous with bounded loads: the first choice whose share of the sessions stays
        within (1 + routing.balance_slack) of its share of the pool's budget. A replica that
        the hash favours while sessions arrive would otherwise queue their cold first turns
        (and so the next turns behind them) while the others idle."""
        budgets = {r.name: capacity.session_budget(r, self._settings) for r in usable}
        total_budget = sum(budgets.values())
        sessions = sum(self.pins.charged(r.name) for r in usable) + 1
        for replica in roomy:
            share = sessions * budgets[replica.name] / total_budget
            bound = math.ceil(share * (1 + self._settings.balance_slack))
            if self.pins.charged(replica.name) + 1 <= bound:
                return replica
        return min(roomy, key=self._fill)

    def _spill_target(
        self, ctx: RequestContext, key: str, pinned: Replica, usable: list[Replica]
    ) -> Replica | None:
        """A pinned session leaves only for a replica with a free running slot and room in its
        budget, and only when the wait at its own replica costs more than two misses: its own,
        and the one its stale checkpoint causes once the pool is full (it outlives the
        checkpoints of the sessions still pinned where it was, so LRU takes one of theirs).
        A re-prefill added to a queue delays everyone behind it, and under load every replica
        has one."""
        settings = self._settings
        stay = capacity.wait_s(pinned, settings)
        if stay <= 2 * capacity.miss_extra_s(len(ctx.prompt), settings):
            return None
        return next(
            (
                r
                for r in ranked(key, usable)
                if r is not pinned and capacity.wait_s(r, settings) == 0.0 and self._has_room(r)
            ),
            None,
        )

    def _has_room(self, replica: Replica) -> bool:
        return self.pins.charged(replica.name) < capacity.session_budget(replica, self._settings)

    def _budgets(self, replicas: Sequence[Replica]) -> str:
        """For the log: each replica's charged sessions / budget, and requests open there."""
        return ", ".join(
            f"{r.name} {self.pins.charged(r.name)}/"
            f"{capacity.session_budget(r, self._settings)} open {r.in_flight}"
            for r in replicas
        )

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
