"""Checkpoint-aware session affinity: the `flashbox` routing policy, and its baselines.

flashbox: a session's first turn goes to its first rendezvous choice that has room in its
checkpoint budget (gateway.routing.capacity) and is within its share of the sessions (bounded
loads); the pin table sends every later turn back there. A pin moves only when its replica
fails or drains (to the session's next rendezvous choice with room: "failover") or when waiting
there costs more than the misses a move causes, and a replica with a free running slot can take
it ("spill").
Each pinned turn is verified once it ends: the engine's cached tokens must cover the session's
previous prompt rounded down to the track interval ("hit"), else "verified_miss". The engine
also checkpoints a finished turn's prompt and output together, so when the new prompt carries
the previous output verbatim after the previous prompt (the client sent the reasoning back, as
GLM's template keeps it), a hit is also checked against prompt and output, rounded down ("the
output promise"), and counted apart (flashbox_output_checkpoint_total): the engine restores
that checkpoint only when the answer's text tokenizes back to the very tokens it sampled, which
the gateway cannot see (a sampled token sequence need not be the tokenizer's own split; the
real engine's random test model almost never is), so its loss says nothing about routing. A
gateway knows the output of the turns it served; a turn served by another gateway of a fleet
falls back to the prompt.

Pins are kept per lineage (gateway.routing.lineage): each conversation of a session (main,
subagents, side requests, the conversation restarted after compaction) is pinned and verified on
its own, so a side request is never compared with the main conversation. A new lineage goes,
in order, where its prompt head's checkpoint is ("head": verified as head_hit or head_miss),
where its session's other lineages are, or to its rendezvous choice; each within the replica's
budget and share. Among the replicas holding its head it takes the one with the least prefill
queued (Replica.prefill_s), and goes cold elsewhere when that queue costs more than the head
saves (which also puts the head's checkpoint there). A turn that adds an image while older
ones remain loses the cache from the first older image on (the engine hashes a request's images
as one bundle: MEDIA.md 3.5) and is counted as "media_reset", not verified.

Baselines for the benchmark: consistent_hash (first rendezvous choice, no pins, no capacity)
and round_robin.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from gateway.errors import NoReplicaError
from gateway.routing import capacity
from gateway.routing.lineage import MAIN, SIDE, HeadTable, SessionInfo, SessionTable
from gateway.routing.picker import Outcome, Outstanding
from gateway.routing.pins import Pin, PinTable
from gateway.routing.rendezvous import ranked
from gateway.routing.replica import Replica, RequestContext, TurnOutput
from gateway.settings import RoutingSettings

log = logging.getLogger("gateway.routing.affinity")

# flashbox_affinity_total{outcome,lineage}: each pinned turn counts once, as hit,
# verified_miss or media_reset (or unverified when it ended without usage); a new lineage placed
# where its head's checkpoint is counts as head_hit or head_miss when it ends; the other outcomes
# count when the pick is made, but "moved": a pinned turn a gateway of a fleet sent before the
# store answered, to a replica another gateway had moved the lineage from (gateway.routing.fleet),
# counted when the store's answer shows it (instead of its hit or verified_miss); "restarted": a
# pinned turn whose prompt no longer extends the lineage's last one (the client rewrote the
# conversation under the same root: Codex's compaction keeps the head and the first user
# message and replaces what follows with a summary; or re-sent it from an earlier point: a
# retry of turn 2 after turn 3), counted when it ends, never verified. The same prompt sent
# again extends the last one by nothing: verified against its own checkpoint (`_promise`).
OUTCOMES = (
    "hit",
    "verified_miss",
    "unverified",
    "media_reset",
    "new",
    "head_hit",
    "head_miss",
    "spill",
    "failover",
    "unpinned",
    "moved",
    "restarted",
)


@dataclass(frozen=True, slots=True)
class AffinityPick:
    replica: Replica
    affinity: str
    # The prefill this request adds to the replica's queue (capacity.prefill_s).
    prefill_s: float = 0.0
    # The lineage's kind (main, subagent, side) and the prompt tokens the replica should
    # serve from its checkpoints (0: none promised); the request's trace shows both.
    kind: str = MAIN
    promised_tokens: int = 0


@dataclass(frozen=True, slots=True)
class _Pending:
    key: str
    affinity: str
    expected_cached: int
    kind: str = MAIN
    # The output promise, when it reaches past `expected_cached` (else 0).
    expected_output: int = 0
    # The turn added an image while older ones remain: the cache legitimately ends earlier.
    media_reset: bool = False
    # The pin the pick made for a new conversation: undone if the engine never takes the
    # request (`forget`) or refuses it (a client's mistake places nothing).
    placed: Pin | None = None


class AffinityPicker:
    # Whether a lineage back after its pin expired goes where it was (`_revived`).
    _revives = True

    def __init__(
        self,
        replicas: Sequence[Replica],
        settings: RoutingSettings,
        count: Callable[[str, str], None],
        clock: Callable[[], float] = time.monotonic,
        *,
        output_checkpoint: Callable[[str], None] | None = None,
    ) -> None:
        self._replicas: list[Replica] = []
        self._by_name: dict[str, Replica] = {}
        self._settings = settings
        self._count = count
        self._output_checkpoint = output_checkpoint or (lambda outcome: None)
        self._clock = clock
        self.pins = PinTable(settings.pin_table_size, settings.pin_idle_ttl_s)
        self.sessions = SessionTable(settings.pin_table_size, settings.pin_idle_ttl_s)
        self.heads = HeadTable(settings.head_table_size, settings.head_idle_ttl_s)
        # Whether a replica restored a head's checkpoint (a verified head_hit): the engine
        # saves heads (the stock one ignores the field), so warming one is worth a prefill.
        self.heads_restored = False
        # Whether a head warmer will prefill the head where it is missing (gateway.routing.warm
        # sets it: the head was offered to it): a holder past its share may then take a new
        # session meanwhile, as the warms will spread the head (`_new_target`).
        self.warms: Callable[[str], bool] = lambda head: False
        self._pending: dict[str, _Pending] = {}
        # Request id -> the replica of every pick not yet reported or forgotten (`pending`).
        # Bounded by the requests in flight: the request path reports or forgets each pick.
        self._picked: dict[str, str] = {}
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
        settings = self._settings
        replica.breaker.configure(
            settings.breaker_failures, settings.breaker_open_s, settings.breaker_trial_s
        )
        self._replicas.append(replica)
        self._by_name[replica.name] = replica

    def remove(self, name: str) -> None:
        """A replica discovery forgot: no longer a choice. Pins there fail over on their next
        turn, as from a failed replica; the tables' entries naming it age out."""
        replica = self._by_name.pop(name, None)
        if replica is not None:
            self._replicas.remove(replica)

    def live_sessions(self, replica: Replica) -> int:
        self.pins.sweep(self._clock())
        return self.pins.live(replica.name)

    # -- pick ------------------------------------------------------------------------------

    async def route(self, ctx: RequestContext, exclude: Collection[str] = ()) -> AffinityPick:
        """`pick`, with whatever the routing state needs around it: nothing in process;
        the shared store's round trips in gateway.routing.fleet. In process it never
        suspends, so no cancellation can land between the pick and its return."""
        return self.pick(ctx, exclude)

    def pending(self) -> Outstanding:
        now = self._clock()
        trials = sum(1 for r in self._replicas if r.breaker.trial_held(now))
        return Outstanding(picks=len(self._picked), trials=trials)

    async def prepare(self) -> None:
        """Nothing to prepare in process (gateway.routing.fleet loads its store scripts)."""

    async def aclose(self) -> None:
        """Nothing to finish in process (gateway.routing.fleet finishes its store writes)."""

    def pick(self, ctx: RequestContext, exclude: Collection[str] = ()) -> AffinityPick:
        now = self._clock()
        usable = [r for r in self._replicas if self._usable(r, exclude, now)]
        if not usable:
            raise NoReplicaError("No healthy engine replica is available; retry shortly.")
        policy, key = self._settings.policy, ctx.key
        if policy == "round_robin" or key is None:
            self._next += 1
            replica = usable[self._next % len(usable)]
            return self._chosen(ctx, replica, "unpinned", None, now, ctx.kind or MAIN)
        if policy == "consistent_hash":
            replica = ranked(ctx.session_key or key, usable)[0]
            return self._chosen(ctx, replica, "unpinned", None, now, ctx.kind or MAIN)
        pin = self.pins.get(key, now) or self._revived(ctx, key, usable, now)
        if pin is None:
            return self._new_lineage(ctx, key, usable, now)
        pinned = self._by_name.get(pin.replica)
        if pinned is None or pinned not in usable:
            return self._place(ctx, key, usable, pin.kind, now)
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
                kind = pin.kind
                self.pins.put(key, target.name, now, leaves_checkpoint=True, kind=kind)
                # Pending too: its prompt is what the next turn's verification expects there.
                pending = _Pending(key, "spill", 0, kind)
                return self._chosen(ctx, target, "spill", pending, now, kind)
        pending = self._promise(ctx, key, pin, pinned)
        return self._chosen(ctx, pinned, "pinned", pending, now, pin.kind)

    def _promise(self, ctx: RequestContext, key: str, pin: Pin, replica: Replica) -> _Pending:
        """What a pinned turn's verification expects of the engine, from the pin as known."""
        interval = capacity.track_interval(replica, self._settings)
        if _rewritten(ctx.prompt, pin):
            log.info(
                "restart: %s lineage %s no longer extends its last prompt (%d characters, "
                "the last %d)",
                pin.kind,
                key[:12],
                len(ctx.prompt),
                pin.prompt_chars,
            )
            return _Pending(key, "restarted", 0, pin.kind)
        # The engine computes at least a prompt's last token: the same prompt again restores
        # its checkpoint below that token, an interval short of its length when aligned.
        last = pin.last_prompt_tokens - (1 if _repeats(ctx.prompt, pin) else 0)
        expected = max(0, last) // interval * interval
        carried = pin.sequence_tokens if _carries_output(ctx.prompt, pin) else 0
        output = carried // interval * interval
        reset = _adds_image(pin.images, ctx.images)
        return _Pending(
            key, "pinned", expected, pin.kind, output if output > expected else 0, reset
        )

    @staticmethod
    def _usable(replica: Replica, exclude: Collection[str], now: float) -> bool:
        """Whether a request may go to `replica` (`exclude`: those it failed on already)."""
        return (
            replica.healthy
            and not replica.draining
            and replica.name not in exclude
            and replica.breaker.allows(now)
        )

    def _place(
        self, ctx: RequestContext, key: str, usable: list[Replica], kind: str, now: float
    ) -> AffinityPick:
        """Failover: the lineage's next rendezvous choice with room."""
        target = self._placement(key, usable, "failover")
        self.pins.put(key, target.name, now, kind=kind)
        pending = _Pending(key, "failover", 0, kind)
        return self._chosen(ctx, target, "failover", pending, now, kind)

    def _revived(
        self, ctx: RequestContext, key: str, usable: list[Replica], now: float
    ) -> Pin | None:
        """A lineage back after its pin expired for idleness (`routing.pin_idle_ttl_s`) goes
        where it was, verified against its last turn there, when that replica may take it
        (usable, room, share): its checkpoint may still be in the pool, and placed as new it
        would restore at best its head elsewhere (the shape benchmark counted those as most of
        its main-turn misses once heads were warmed on every replica). A gateway of a fleet
        leaves this to the shared store (`_revives`)."""
        old = self.pins.expired(key) if self._revives else None
        if old is None:
            return None
        replica = self._by_name.get(old.replica)
        if replica is None or replica not in usable or not self._fits(replica, usable, old.kind):
            return None
        pin = self.pins.revive(key, now)
        if pin is not None and ctx.session_key is not None and old.kind == MAIN:
            session = self.sessions.touch(ctx.session_key, now)
            if session.main is None:
                session.main, session.main_head, session.main_tools = key, ctx.head, ctx.tools
            session.replica = replica.name
        return pin

    def _new_lineage(
        self, ctx: RequestContext, key: str, usable: list[Replica], now: float
    ) -> AffinityPick:
        """A conversation this gateway has not pinned: its session's bookkeeping, then its
        placement (where its head is, else with its session, else its rendezvous choice)."""
        session: SessionInfo | None = None
        kind = ctx.kind or MAIN
        if ctx.session_key is not None and ctx.lineage is not None:
            session = self.sessions.touch(ctx.session_key, now)
            kind = ctx.kind or self._undeclared_kind(ctx, session, now)
            if kind == MAIN:
                self._main_changes(ctx, key, session)
        target, affinity, expected = self._new_target(ctx, key, kind, usable, session, now)
        pin = self.pins.put(key, target.name, now, kind=kind)
        if session is not None:
            session.replica = target.name
        pending = _Pending(key, affinity, expected, kind, placed=pin)
        return self._chosen(ctx, target, affinity, pending, now, kind)

    def _undeclared_kind(self, ctx: RequestContext, session: SessionInfo, now: float) -> str:
        """A conversation with tools is a main one; one without is a side request (a title, a
        summary) when its session has a live main conversation, else the session's main one
        (a chat without tools)."""
        if ctx.tools:
            return MAIN
        main = self.pins.peek(session.main) if session.main is not None else None
        return SIDE if main is not None and now - main.last_used < self.pins.idle_ttl_s else MAIN

    def _main_changes(self, ctx: RequestContext, key: str, session: SessionInfo) -> None:
        """A new main lineage with the same head as the session's live one is the conversation
        restarted (compaction, /clear, an edited first message): the old one will not be asked
        for again, so it stops holding budget. So does any when the client says it compacted,
        and a tool-less one that came first when one with tools arrives (it was a side
        request: opencode may send its title request before its first agent turn)."""
        old = session.main
        if old is not None and old != key:
            why = (
                "compacted"
                if ctx.compacted
                else "new root, same head"
                if session.main_head == ctx.head
                else "a side request"
                if ctx.tools and not session.main_tools
                else None
            )
            pin = self._retire(old) if why is not None else None
            if pin is not None:
                log.info(
                    "retired lineage %s of session %s on %s (%s)",
                    old[:12],
                    (ctx.session_key or "")[:12],
                    pin.replica,
                    why,
                )
        session.main, session.main_head, session.main_tools = key, ctx.head, ctx.tools

    def _new_target(
        self,
        ctx: RequestContext,
        key: str,
        kind: str,
        usable: list[Replica],
        session: SessionInfo | None,
        now: float,
    ) -> tuple[Replica, str, int]:
        cold = self._cold_target(key, kind, usable, session)
        if ctx.head is None or not ctx.head_tokens:
            return cold, "new", 0
        held = self.heads.replicas(ctx.head, now)
        # In the lineage's own rendezvous order, which breaks ties: every session of a project
        # has the same head, and one order for all would fill the same replica first every time.
        if not held:
            return cold, "new", 0
        order = ranked(key, usable)
        holders = [r for r in order if r.name in held and self._fits(r, usable, kind, extra=1)]
        # The one whose queue ends first: a head hit behind another session's cold prefill
        # waits as long as the prefill it saves, and one with every running slot taken waits
        # for a slot.
        best = min(
            holders, key=lambda r: r.prefill_s + capacity.wait_s(r, self._settings), default=None
        )
        # None within its share: the head is on one replica until it is warmed elsewhere, and
        # from the fourth session on that one holds the second, the third and the head itself,
        # past its share. Without warming, a cold session elsewhere saves the head there too;
        # while warms will spread it (a head the engine was seen to restore), the fourth
        # session went cold during the warms instead of restoring the head where it is.
        spreading = self.heads_restored and self.warms(ctx.head)
        if (best is None and spreading) or (best is not None and not self._idle_now(best)):
            # Every holder within its share is busy (or none is within it, above): one that
            # idles goes first whatever its share, if its budget has room. The share keeps a
            # burst of cold first turns from queueing on the replica the hash favours; a
            # replica with nothing queued is
            # the opposite case, and a head restore behind a forward in progress waits that
            # whole forward (the shape benchmark found idle holders skipped this way while the
            # others had 10-30 s queued and every running slot taken).
            idle = next(
                (r for r in order if r.name in held and self._idle_now(r) and self._has_room(r)),
                None,
            )
            if idle is not None:
                best = idle
        if best is None:
            return cold, "new", 0
        interval = capacity.track_interval(best, self._settings)
        expected = ctx.head_tokens // interval * interval
        if not expected:
            return best, "new", 0
        there = best.prefill_s + self._prefill_s(ctx, expected)
        if best.prefill_s > 0 and ctx.save_head:
            # Every holder has a prefill queued: an idle replica that does not hold the head
            # yet gets it now when its cold prefill ends before the wait and the restore would
            # (this lineage prefills it there cold, and the engine saves it). A project's
            # sessions then have holders to choose from (gateway.routing.warm adds them with
            # no user waiting, once a head has been restored).
            spare = self._idle(key, usable, kind, skip=held)
            if spare is not None and self._prefill_s(ctx, 0) < there:
                log.info(
                    "head %s: its holders are busy (%.0f s queued at best); saved at %s too",
                    ctx.head[:12],
                    best.prefill_s,
                    spare.name,
                )
                return spare, "new", 0
        elsewhere = cold.prefill_s + self._prefill_s(ctx, 0)
        if cold.name not in held and elsewhere < there:
            log.info(
                "head %s: queue at %s (%.0f s) costs more than a cold prefill at %s",
                ctx.head[:12],
                best.name,
                best.prefill_s,
                cold.name,
            )
            return cold, "new", 0
        return best, "head", expected

    def _cold_target(
        self, key: str, kind: str, usable: list[Replica], session: SessionInfo | None
    ) -> Replica:
        """Where a new lineage goes without a head's checkpoint: with its session's other
        lineages when that replica has room and share, else its rendezvous choice; but not
        behind a queued prefill while a replica where it fits has none. Its prefill restores
        nothing either way, and a client starts several lineages at once (the first turn and
        its title request, parallel subagents): kept together, each waits for the others."""
        target: Replica | None = None
        if session is not None and session.replica is not None:
            together = self._by_name.get(session.replica)
            if together is not None and together in usable and self._fits(together, usable, kind):
                target = together
        if target is None:
            target = self._placement(key, usable, "new")
        if target.prefill_s > 0:
            return self._idle(key, usable, kind) or target
        return target

    def _idle_now(self, replica: Replica) -> bool:
        """Nothing queued to prefill there, and a running slot free."""
        return replica.prefill_s == 0 and replica.in_flight < capacity.max_running(
            replica, self._settings
        )

    def _idle(
        self, key: str, usable: list[Replica], kind: str, skip: Collection[str] = ()
    ) -> Replica | None:
        """The lineage's first rendezvous choice with no prefill queued where it fits."""
        return next(
            (
                r
                for r in ranked(key, usable)
                if r.prefill_s == 0 and r.name not in skip and self._fits(r, usable, kind)
            ),
            None,
        )

    def _fits(self, replica: Replica, usable: list[Replica], kind: str, extra: int = 0) -> bool:
        """Whether a new lineage may join `replica` rather than its rendezvous choice: a side
        request's checkpoint is charged only while younger than the pinned ones (pins.py), so
        anywhere usable; a lineage that comes back needs room and the bounded-load share.
        `extra`: lineages past the share allowed for a head's checkpoint, which saves the new
        lineage a head's prefill (~22 s at 30k): without it, the first few sessions of a
        project could never share one (the bound is strict while sessions are few)."""
        if kind == SIDE:
            return True
        return self._has_room(replica) and (
            len(usable) == 1 or self._within_share(replica, usable, extra)
        )

    def _within_share(self, replica: Replica, usable: list[Replica], extra: int = 0) -> bool:
        budgets = {r.name: capacity.session_budget(r, self._settings) for r in usable}
        sessions = sum(self._charged(r.name) for r in usable) + 1
        share = sessions * budgets[replica.name] / sum(budgets.values())
        bound = math.ceil(share * (1 + self._settings.balance_slack)) + extra
        return self._charged(replica.name) + 1 <= bound

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
        for replica in roomy:
            if self._within_share(replica, usable):
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

    def _charged(self, name: str) -> int:
        """Checkpoints charged to a replica's budget (pins.py); gateway.routing.fleet counts
        the whole fleet's."""
        return self.pins.charged(name)

    def _retire(self, key: str) -> Pin | None:
        return self.pins.retire(key)

    def _has_room(self, replica: Replica) -> bool:
        return self._charged(replica.name) < capacity.session_budget(replica, self._settings)

    def _budgets(self, replicas: Sequence[Replica]) -> str:
        """For the log: each replica's charged sessions / budget, and requests open there."""
        return ", ".join(
            f"{r.name} {self._charged(r.name)}/"
            f"{capacity.session_budget(r, self._settings)} open {r.in_flight}"
            for r in replicas
        )

    def _fill(self, replica: Replica) -> float:
        return self._charged(replica.name) / capacity.session_budget(replica, self._settings)

    def _chosen(
        self,
        ctx: RequestContext,
        replica: Replica,
        affinity: str,
        pending: _Pending | None,
        now: float,
        kind: str,
    ) -> AffinityPick:
        self._took(ctx, replica, now)
        if pending is not None:
            self._pending[ctx.request_id] = pending
        if affinity not in ("pinned", "head"):
            self._count(affinity, kind)
        cached = 0
        if pending is not None:
            cached = max(pending.expected_cached, pending.expected_output)
        return AffinityPick(replica, affinity, self._prefill_s(ctx, cached), kind, cached)

    def _took(self, ctx: RequestContext, replica: Replica, now: float) -> None:
        """The request holds its pick of `replica` (and the trial there, while half-open)
        until it is reported or forgotten."""
        self._picked[ctx.request_id] = replica.name
        expired = replica.breaker.on_pick(now, ctx.request_id)
        if expired is not None:
            log.warning(
                "circuit breaker for %s: trial %s never reported within routing.breaker_trial_s"
                " (%.0f s); %s tries instead",
                replica.name,
                expired.holder,
                replica.breaker.trial_s,
                ctx.request_id,
            )

    def _gave_back(self, ctx: RequestContext, replica: Replica) -> None:
        """The request's pick is over (reported or forgotten): the trial it held, if any,
        goes to the next request (an outcome that told something already closed or reopened
        the breaker)."""
        self._picked.pop(ctx.request_id, None)
        replica.breaker.trial_over(ctx.request_id)

    def _verify_output(self, replica: Replica, pending: _Pending, cached_tokens: int) -> None:
        if cached_tokens >= pending.expected_output:
            self._output_checkpoint("restored")
            return
        self._output_checkpoint("lost")
        log.info(
            "output checkpoint lost on %s: %s lineage %s cached %d, its prompt's %d but not "
            "the %d of prompt and answer",
            replica.name,
            pending.kind,
            pending.key[:12],
            cached_tokens,
            pending.expected_cached,
            pending.expected_output,
        )

    def _prefill_s(self, ctx: RequestContext, cached_tokens: int) -> float:
        """The engine seconds the request's prefill adds to a replica's queue."""
        tokens = capacity.prompt_tokens(len(ctx.prompt), ctx.image_tokens, self._settings)
        return capacity.prefill_s(tokens, cached_tokens, self._settings)

    # -- report ----------------------------------------------------------------------------

    def report(
        self,
        ctx: RequestContext,
        replica: Replica,
        outcome: Outcome,
        *,
        prompt_tokens: int = 0,
        cached_tokens: int = 0,
        output: TurnOutput | None = None,
    ) -> None:
        self._ended(ctx, replica, outcome)
        self._learn(ctx, replica, outcome, prompt_tokens, cached_tokens, output)

    def _ended(self, ctx: RequestContext, replica: Replica, outcome: Outcome) -> None:
        """What the outcome tells of the replica (health, breaker), and the pick given back."""
        now = self._clock()
        was_open = replica.breaker.opened_at is not None
        if outcome is Outcome.CONNECT_FAILED:
            # Passive detection: a refused connection means down now, not after the next probe.
            replica.healthy = False
            replica.successes = 0
            replica.breaker.failure(now)
        elif outcome is Outcome.UPSTREAM_ERROR:
            replica.breaker.failure(now)
        elif outcome is Outcome.OK:
            replica.breaker.success()
        self._gave_back(ctx, replica)
        _log_breaker(replica, was_open)

    def _learn(
        self,
        ctx: RequestContext,
        replica: Replica,
        outcome: Outcome,
        prompt_tokens: int,
        cached_tokens: int,
        output: TurnOutput | None,
    ) -> None:
        """What the turn tells of its conversation: verification, the pin's last prompt."""
        now = self._clock()
        pending = self._pending.pop(ctx.request_id, None)
        if pending is None:
            return
        if outcome is Outcome.REJECTED and pending.placed is not None:
            self._unplace(pending)
            return
        ok = outcome is Outcome.OK and prompt_tokens > 0
        kind = pending.kind
        if pending.affinity == "restarted":
            self._count("restarted", kind)
        elif pending.affinity in ("pinned", "head") and outcome is not Outcome.CONNECT_FAILED:
            head = pending.affinity == "head"
            if not ok:
                self._count("unverified", kind)
            elif pending.media_reset:
                self._count("media_reset", kind)
            elif cached_tokens >= pending.expected_cached:
                self._count("head_hit" if head else "hit", kind)
                self.heads_restored = self.heads_restored or head
                if pending.expected_output:
                    self._verify_output(replica, pending, cached_tokens)
            else:
                self._count("head_miss" if head else "verified_miss", kind)
                log.info(
                    "%s on %s: %s lineage %s cached %d of the %d promised",
                    "head miss" if head else "verified miss",
                    replica.name,
                    kind,
                    pending.key[:12],
                    cached_tokens,
                    pending.expected_cached,
                )
        pin = self.pins.peek(pending.key)
        if ok and pin is not None and pin.replica == replica.name:
            pin.last_prompt_tokens = prompt_tokens
            pin.images = ctx.images
            _note_prompt(pin, ctx.prompt)
            _note_output(pin, ctx.prompt, prompt_tokens, output)
        # A turn that passes through a head checkpoint the replica holds touches it too (the
        # engine patch keeps heads most recently used while their sessions go on).
        if (
            ok
            and ctx.head is not None
            and 0 < ctx.head_tokens < prompt_tokens
            and (
                saved_head(ctx, pending.affinity, cached_tokens)
                or replica.name in self.heads.replicas(ctx.head, now)
            )
        ):
            self._hold_head(ctx.head, replica.name, now)

    def _hold_head(self, head: str, replica: str, now: float) -> None:
        """The replica holds the head's checkpoint: where new lineages with it may go, and
        charged to its budget like a left-behind checkpoint."""
        self.heads.put(head, replica, now)
        self.pins.leave(replica, "head:" + head, now)

    def warm_targets(self, head: str) -> list[Replica]:
        """Where the head's checkpoint should be prefilled now (gateway.routing.warm): usable
        replicas that do not hold it, with room in their budget, no prefill queued and a free
        running slot. None while the head is held nowhere (its sessions stopped, or it was
        never saved), while no head has been restored yet, or with one replica."""
        if not self.heads_restored:
            return []
        now = self._clock()
        held = self.heads.replicas(head, now)
        if not held:
            return []
        usable = [r for r in self._replicas if self._usable(r, (), now)]
        if len(usable) < 2:
            return []
        return [r for r in usable if r.name not in held and self._idle_now(r) and self._has_room(r)]

    def head_warmed(self, head: str, replica: Replica) -> None:
        """The engine prefilled the head at `replica` (it holds the checkpoint now), charged
        to its budget like a head a session saved there."""
        self._hold_head(head, replica.name, self._clock())

    async def claim_warm(self, head: str, replica: Replica) -> bool:
        """Whether this gateway warms the head there (gateway.routing.fleet asks the store:
        one gateway of a fleet does it)."""
        return True

    def first_token(self, ctx: RequestContext) -> None:
        """The request's first token came (or it ended without one); in process, nothing
        waits for it (gateway.routing.fleet sends a pinned turn's fetch then)."""

    def forget(self, ctx: RequestContext, replica: Replica) -> None:
        """Drop what pick noted for a request that never reached the engine (it waited too
        long for a running slot, or its client left): a conversation it placed is unplaced,
        since no checkpoint was made for it, and were it the replica's half-open breaker
        trial, another request may try."""
        self._gave_back(ctx, replica)
        pending = self._pending.pop(ctx.request_id, None)
        if pending is not None and pending.placed is not None:
            self._unplace(pending)

    def _unplace(self, pending: _Pending) -> None:
        """Drop the pin a request made, unless another request's turn has been served on it
        since (a turn of the same conversation sent meanwhile made the checkpoint real). In a
        fleet the store keeps its claim until it idles out; only this gateway's tables drop it."""
        pin = self.pins.peek(pending.key)
        if pin is not None and pin is pending.placed and not pin.last_prompt_tokens:
            self.pins.drop(pending.key)


def _log_breaker(replica: Replica, was_open: bool) -> None:
    """The breaker's transitions, once each (a reopened half-open trial is not news)."""
    breaker = replica.breaker
    if breaker.opened_at is not None and not was_open:
        log.warning(
            "circuit breaker for %s opened after %d failed requests in a row; no requests "
            "there for %.0f s, then one trial",
            replica.name,
            breaker.failures,
            breaker.open_s,
        )
    elif breaker.opened_at is None and was_open:
        log.warning("circuit breaker for %s closed: a request succeeded", replica.name)


def saved_head(ctx: RequestContext, affinity: str, cached_tokens: int) -> bool:
    """Whether the engine put the turn's head checkpoint where it served it: restored it
    there, or was asked to save it and prefilled through the head's end (a turn restored from
    a later checkpoint of its own session never computes the head's state)."""
    return affinity == "head" or (ctx.save_head and cached_tokens < ctx.head_tokens)


def _output_digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _note_output(pin: Pin, prompt: str, prompt_tokens: int, output: TurnOutput | None) -> None:
    if output is None or not output.text or output.tokens <= 0:
        pin.sequence_tokens = 0
        return
    pin.output_at, pin.output_chars = len(prompt), len(output.text)
    pin.output_digest = _output_digest(output.text)
    # The engine's state covers the sequence up to its last token's input: the last generated
    # token was never fed back, so it is not in the checkpoint.
    pin.sequence_tokens = prompt_tokens + output.tokens - 1


# How much of the last prompt's end `_rewritten` compares: the tail before its last
# _REWRITE_MARGIN characters (a client that drops the last generation prompt's reasoning opener
# still extends what the checkpoint holds, which ends a track interval earlier), _REWRITE_WINDOW
# long, so the check costs the same at any prompt length. The margin itself is digested apart:
# a prompt of the same length is the same prompt only when it matches there too.
_REWRITE_MARGIN = 256
_REWRITE_WINDOW = 4096
_DIGEST = 16  # bytes of each digest in Pin.prompt_tail: the window's, then the margin's


def _prompt_tail(prompt: str, end: int) -> bytes:
    stop = max(0, end - _REWRITE_MARGIN)
    return _output_digest(prompt[max(0, stop - _REWRITE_WINDOW) : stop])


def _prompt_end(prompt: str, end: int) -> bytes:
    return _output_digest(prompt[max(0, end - _REWRITE_MARGIN) : end])


def _note_prompt(pin: Pin, prompt: str) -> None:
    pin.prompt_chars = len(prompt)
    pin.prompt_tail = _prompt_tail(prompt, len(prompt)) + _prompt_end(prompt, len(prompt))


def _rewritten(prompt: str, pin: Pin) -> bool:
    """Whether `prompt` no longer extends the pin's last prompt (seen by this gateway): shorter
    than it (the conversation re-sent from an earlier point: a client's retry), as long but not
    the same, or different in the tail the check compares. An identical prompt extends it by
    nothing (`_repeats`)."""
    if not pin.prompt_chars:
        return False
    if len(prompt) < pin.prompt_chars:
        return True
    if len(prompt) == pin.prompt_chars:
        return not _repeats(prompt, pin)
    if pin.prompt_chars <= _REWRITE_MARGIN:
        return False
    return _prompt_tail(prompt, pin.prompt_chars) != pin.prompt_tail[:_DIGEST]


def _repeats(prompt: str, pin: Pin) -> bool:
    """Whether `prompt` is the pin's last prompt again (an SDK that sends the same messages
    twice, or a retry of the last turn)."""
    end = len(prompt)
    return (
        end == pin.prompt_chars
        and _prompt_tail(prompt, end) + _prompt_end(prompt, end) == pin.prompt_tail
    )


def _carries_output(prompt: str, pin: Pin) -> bool:
    """Whether `prompt` continues the pin's last prompt with its last output, verbatim (the
    prefix before it is the previous prompt's, or the turn misses either way)."""
    if not pin.sequence_tokens:
        return False
    end = pin.output_at + pin.output_chars
    return len(prompt) > end and _output_digest(prompt[pin.output_at : end]) == pin.output_digest


def _adds_image(before: tuple[str, ...], now: tuple[str, ...]) -> bool:
    """At least one new image while at least one earlier image remains (MEDIA.md 7.6)."""
    if not now or not before:
        return False
    earlier = set(before)
    return any(d not in earlier for d in now) and any(d in earlier for d in now)
