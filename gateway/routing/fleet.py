"""Several gateways, one routing state: the flashbox policy with its tables in the shared store.

With `state_url` set, every gateway of a fleet routes a lineage the same way: the pin one
gateway wrote is the one the next gateway reads, with the last prompt tokens its verification
expects, and the checkpoint budgets count every gateway's sessions (gateway.routing.
shared_tables has the keys). `route` makes the store's round trips around the synchronous
pick, each bounded by `state.timeout_s` (gateway.shared_state):

1. fetch (one round trip, read only): the lineage's pin, and for a new lineage its session,
   the session's main lineage and its head's replicas; when the pick may place the lineage,
   every usable replica's charged count. They go into the local tables, which stay this
   gateway's cache of the fleet's state. It carries the turn reports waiting.
2. pick, on the local tables, as in process (gateway.routing.affinity), with the fleet's counts.
3. claim (one round trip), only when the pick changed something: a new lineage, a failover, a
   spill, or a pin the store lacks. Atomic: a gateway that lost a race for the same new
   lineage gets the winner's replica back and sends the request there ("adopted").

A pinned turn, the usual one, does not wait for the store: it is sent to the replica of this
gateway's pin, and its fetch goes after its first token. A pin moves only on a failover or a
spill, and every move is heard (gateway.routing.moves), so only a pin the store confirmed and
no other gateway moved since goes first. The fetch's answer brings the lineage's last prompt
tokens (the other gateways' turns), and the turn is verified against them. Should another
gateway have moved the lineage unheard, the turn went to the replica it left: it is counted as
"moved", not verified, and the store's pin is adopted here, so the lineage's next turn goes
where the other gateway put it (writing this turn's replica back instead would let two gateways
that each knew a different replica move the lineage back and forth, a miss per turn). A pinned
turn waits for the fetch when a replica has requests queued (it may spill: the pick needs the
fleet's counts), or with `state.pinned_turns_wait`.

Each turn's prompt tokens, its pin's last use and its prompt head are reported after it ends
(gateway.routing.write_back). The requests of one gateway that are likely to place a lineage
(it has no pin for it) go through fetch, pick and claim one at a time, so each pick counts
every placement the gateway made before it, as in process.

When the store does not answer (run returns None, counted by SharedStore), the gateway routes
on its local tables, rendezvous hashing (which gateways compute alike) and the fleet's counts
as last read; the pins it makes or moves meanwhile are written back once the store answers
(gateway.routing.write_back: the lineage's latest turn decides), and a pin the store lost (a
restarted store) is written back by the next gateway that serves a turn of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Collection, Sequence

from gateway.routing import capacity
from gateway.routing.affinity import AffinityPick, AffinityPicker, _Pending
from gateway.routing.moves import MoveWatch
from gateway.routing.picker import Outcome
from gateway.routing.pins import Pin
from gateway.routing.replica import Replica, RequestContext, TurnOutput
from gateway.routing.shared_tables import (
    Claim,
    Claimed,
    Report,
    SessionWrite,
    SharedRoutingTables,
    Snapshot,
    StoredPin,
)
from gateway.routing.write_back import WriteBack
from gateway.settings import RoutingSettings

log = logging.getLogger("gateway.routing.fleet")

# Picks that change a pin (a pinned turn changes nothing until its report).
_PLACED = ("new", "head", "failover", "spill")

# A pinned turn's fetch waits for its first token at most this long: a prefill that takes
# longer does not notice a millisecond, and a move should be found out before the turn ends.
_CONFIRM_AFTER_S = 1.0


def _cancels() -> int:
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


def _honour_cancel(before: int) -> None:
    """Raise the CancelledError a round trip lost. Python 3.11's asyncio.wait_for, which
    redis-py sends commands with, drops a cancellation that lands as the write completes
    (fixed in 3.12): the round trip then answers as if the caller still waited, and a
    cancelled request would be handed a pick."""
    if _cancels() > before:
        raise asyncio.CancelledError


class FleetPicker(AffinityPicker):
    # An expired pin here may have been moved by another gateway since: the store's answer
    # places a returning lineage, not this gateway's memory of it.
    _revives = False

    def __init__(
        self,
        replicas: Sequence[Replica],
        settings: RoutingSettings,
        count: Callable[[str, str], None],
        tables: SharedRoutingTables,
        *,
        claimed: Callable[[str], None],
        max_pending_writes: int,
        write_skipped: Callable[[], None],
        report_delay_s: float,
        pinned_turns_wait: bool = False,
        clock: Callable[[], float] = time.monotonic,
        output_checkpoint: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(replicas, settings, count, clock, output_checkpoint=output_checkpoint)
        self._tables = tables
        self._pinned_turns_wait = pinned_turns_wait
        # The fetches of pinned turns sent before the store answered (`_confirm`), by request.
        self._confirming: dict[str, asyncio.Task[None]] = {}
        # Set at the request's first token (or its end): its fetch goes then.
        self._started: dict[str, asyncio.Event] = {}
        self._watch = MoveWatch(tables.store, self._heard_move)
        self._claimed = claimed
        self.write_back = WriteBack(
            tables,
            self.pins,
            clock,
            claimed=claimed,
            max_pending_writes=max_pending_writes,
            write_skipped=write_skipped,
            report_delay_s=report_delay_s,
        )
        # Replica -> (live lineages, charged checkpoints): the newest counts the store
        # answered (fetches and claims both count; one answered late does not replace a newer
        # one), plus this gateway's placements since. Kept while the store is away: the last
        # fleet-wide count knows the other gateways' sessions, the local tables only those
        # this gateway saw. Empty until the store answers (the local tables count then).
        self._fleet: dict[str, tuple[int, int]] = {}
        self._fleet_ms = 0
        # Answers come out of order only within a round trip's bound (a later one is a
        # timeout); a count older than that is the store's clock stepping back.
        self._reorder_ms = tables.timeout_s * 1000
        # Held from fetch to claim by a request for a lineage this gateway has no pin for (it
        # is most likely placed now): each such pick then counts every placement this gateway
        # made before it, as in process. Without it, picks made while other placements' claims
        # are on their way, or after a fetch answered before those landed, would see replicas
        # emptier than they are, and bounded loads would crowd them. Pinned turns never wait.
        self._placing = asyncio.Lock()
        # Lineages retired by the pick being made (written with its claim).
        self._retiring: list[str] = []
        # The store's clock minus this gateway's, ms, as the latest fetch measured (None: no
        # fetch yet). Turns made while the store is away are dated with it.
        self._offset_ms: float | None = None

    async def prepare(self) -> None:
        await self._tables.prepare()
        self._watch.start()

    # -- the store's round trips around the pick ---------------------------------------------

    async def route(self, ctx: RequestContext, exclude: Collection[str] = ()) -> AffinityPick:
        key = ctx.key
        if self._settings.policy != "flashbox" or key is None:
            return self.pick(ctx, exclude)
        self._watch.start()
        if self.pins.peek(key) is not None:
            return await self._route(ctx, key, exclude)
        async with self._placing:
            return await self._route(ctx, key, exclude)

    async def _route(self, ctx: RequestContext, key: str, exclude: Collection[str]) -> AffinityPick:
        cancels = _cancels()
        session = ctx.session_key if ctx.lineage is not None else None
        head = ctx.head if ctx.head_tokens else None
        usable = [r for r in self._replicas if r.healthy and not r.draining]
        names = [r.name for r in usable]
        # Counts matter to a pick that places; a pinned turn may spill only where requests
        # queue (the store counts anyway for a lineage it has no pin for on a usable replica).
        may_spill = self._settings.spill and any(
            capacity.wait_s(r, self._settings) > 0 for r in usable
        )
        if not may_spill and self._sends_before_answer(key, exclude):
            return self._pinned_now(ctx, key, exclude, session, head, names)
        # The reports waiting ride along (gateway.routing.write_back).
        reports = self.write_back.take_reports()
        epoch = self._epoch()
        try:
            snapshot = await self._tables.fetch(
                key,
                session,
                head,
                names,
                count=may_spill or self.pins.peek(key) is None,
                reports=reports,
            )
        except BaseException:
            # Cancelled (the client left) with the fetch out: it took nothing but the reports,
            # and a store that may never have read them is asked again with the next one.
            self.write_back.put_back(reports)
            raise
        if snapshot is None and reports:
            self.write_back.put_back(reports)
        _honour_cancel(cancels)
        # From here to the claim nothing awaits: the pick sees this snapshot and no other.
        now = self._clock()
        if snapshot is not None:
            self._offset_ms = snapshot.now_ms - now * 1000
            self._apply(ctx, key, snapshot, now)
        turn_ms = self._turn_ms(now)
        # The pick replaces a pin it moves (PinTable.put): `before` keeps the old one.
        before = self.pins.peek(key)
        prior = before.replica if before is not None else ""
        self._retiring = []
        pick = self.pick(ctx, exclude)
        retired, self._retiring = self._retiring, []
        claim = self._claim_for(ctx, key, pick, snapshot, retired)
        if claim is None:
            if snapshot is None:
                self.write_back.turned(key, turn_ms)
            elif snapshot.pin is not None:
                self._confirm_pin(key, snapshot.pin.replica, epoch)
            return pick
        placed = self._count_placement(key, pick, before)
        try:
            claimed = None if snapshot is None else await self._claim(key, claim, names)
            _honour_cancel(cancels)
        except BaseException:
            self._abandoned(ctx, key, pick, claim.expected, placed, turn_ms)
            raise
        if claimed is None:
            # Written once the store answers (gateway.routing.write_back).
            self.write_back.unsent(key, claim.expected if snapshot is not None else prior, turn_ms)
            return pick
        if claimed.pin.replica == pick.replica.name:
            self._confirm_pin(key, claimed.pin.replica, epoch)
            return pick
        adopted = self._adopt(ctx, key, pick, claimed.pin)
        self._confirm_pin(key, claimed.pin.replica, epoch)
        return adopted

    def _abandoned(
        self,
        ctx: RequestContext,
        key: str,
        pick: AffinityPick,
        expected: str,
        placed: list[tuple[str, int, int]],
        turn_ms: int,
    ) -> None:
        """Cancelled (the client left) with the claim out, before anyone could report or
        forget the pick: it is forgotten here, before the CancelledError goes on. A new
        conversation's pin goes with its budget charge (the store keeps a claim it may have
        written until it idles out, as for any forgotten pick); a pin that stays (a failover
        or spill moved it, or another turn of the lineage made it real meanwhile) is written
        back, as when the store does not answer."""
        self.forget(ctx, pick.replica)
        if self.pins.peek(key) is None:
            for name, live, charged in placed:
                self._bump(name, -live, -charged)
            return
        self.write_back.unsent(key, expected, turn_ms)

    # -- a pinned turn sent before the store answers ------------------------------------------

    def _sends_before_answer(self, key: str, exclude: Collection[str]) -> bool:
        """Whether the pick is a pinned turn to a replica this request may use, so nothing the
        store can answer changes where it goes unless another gateway moved the lineage."""
        if self._pinned_turns_wait or self.write_back.unsent_turn(key) is not None:
            return False
        pin = self.pins.peek(key)
        now = self._clock()
        if (
            pin is None
            or now - pin.last_used >= self.pins.idle_ttl_s
            or not pin.confirmed
            or pin.confirmed != self._epoch()
        ):
            return False
        replica = self._by_name.get(pin.replica)
        return replica is not None and self._usable(replica, exclude, now)

    def _pinned_now(
        self,
        ctx: RequestContext,
        key: str,
        exclude: Collection[str],
        session: str | None,
        head: str | None,
        names: list[str],
    ) -> AffinityPick:
        pick = self.pick(ctx, exclude)
        if pick.affinity != "pinned":  # unreachable by _sends_before_answer's checks
            raise AssertionError(f"a pinned turn was picked as {pick.affinity}")
        started = self._started[ctx.request_id] = asyncio.Event()
        task = asyncio.get_running_loop().create_task(
            self._confirm(ctx, key, pick, session, head, names, started)
        )
        self._confirming[ctx.request_id] = task
        task.add_done_callback(lambda done: self._confirmed(ctx.request_id, done))
        return pick

    def _confirmed(self, request_id: str, task: asyncio.Task[None]) -> None:
        if self._confirming.get(request_id) is task:
            del self._confirming[request_id]
            self._started.pop(request_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("a pinned turn's fetch failed", exc_info=task.exception())

    async def _confirm(
        self,
        ctx: RequestContext,
        key: str,
        pick: AffinityPick,
        session: str | None,
        head: str | None,
        names: list[str],
        started: asyncio.Event,
    ) -> None:
        """The fetch of a pinned turn already sent (see the module docstring), once its first
        token has come: sent beside the engine's prefill, its answer and the store's own
        wake-up cost the first token CPU on a busy host, and only the turn's end needs it."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CONFIRM_AFTER_S):
                await started.wait()
        reports = self.write_back.take_reports()
        epoch = self._epoch()
        try:
            snapshot = await self._tables.fetch(
                key, session, head, names, count=False, reports=reports
            )
        except BaseException:
            self.write_back.put_back(reports)  # cancelled (shutdown): the next fetch takes them
            raise
        now = self._clock()
        if snapshot is None:
            if reports:
                self.write_back.put_back(reports)
            return
        self._offset_ms = snapshot.now_ms - now * 1000
        stored = snapshot.pin
        sent_to = pick.replica.name
        if stored is not None and stored.replica != sent_to:
            self._apply(ctx, key, snapshot, now)
            self._confirm_pin(key, stored.replica, epoch)
            self._moved(ctx, key, sent_to, stored.replica)
            return
        self._apply(ctx, key, snapshot, now)
        if stored is not None:
            self._confirm_pin(key, stored.replica, epoch)
        pending = self._pending.get(ctx.request_id)
        pin = self.pins.peek(key)
        if pending is not None and pin is not None and pin.replica == sent_to:
            # Verified against the lineage's latest turn, whichever gateway served it (the
            # report may already have come for a turn shorter than a round trip: then the
            # promise as this gateway knew it stands).
            self._pending[ctx.request_id] = self._promise(ctx, key, pin, pick.replica)
        claim = self._claim_for(ctx, key, pick, snapshot, [])
        if claim is None:
            return
        claimed = await self._claim(key, claim, names)
        if claimed is None:
            self.write_back.unsent(key, claim.expected, self._turn_ms(self._clock()))
            return
        if claimed.pin.replica == sent_to:
            self._confirm_pin(key, sent_to, epoch)
        else:
            # Another gateway wrote a pin first (the store had lost this one).
            self.pins.adopt(
                key,
                claimed.pin.replica,
                self._clock(),
                kind=claimed.pin.kind,
                last_prompt_tokens=claimed.pin.last_prompt_tokens,
                images=claimed.pin.images,
            )
            self._confirm_pin(key, claimed.pin.replica, epoch)
            self._moved(ctx, key, sent_to, claimed.pin.replica)

    async def _claim(self, key: str, claim: Claim, names: list[str]) -> Claimed | None:
        """The claim's round trip; when answered, its counts and result taken in."""
        claimed = await self._tables.claim(claim, names)
        if claimed is not None:
            self._take_counts(claimed.now_ms, claimed.counts)
            self._claimed(claimed.status)
            self.write_back.sent(key)
        return claimed

    def _moved(self, ctx: RequestContext, key: str, sent_to: str, stored: str) -> None:
        """The turn went to `sent_to`, but another gateway had moved the lineage to `stored`."""
        pending = self._pending.get(ctx.request_id)
        if pending is not None and pending.affinity == "pinned":
            self._pending[ctx.request_id] = dataclasses.replace(
                pending, affinity="moved", expected_cached=0, expected_output=0
            )
            self._count("moved", pending.kind)
        log.info(
            "lineage %s: sent to %s, but another gateway had moved it to %s (its next turn's)",
            key[:12],
            sent_to,
            stored,
        )

    def first_token(self, ctx: RequestContext) -> None:
        started = self._started.get(ctx.request_id)
        if started is not None:
            started.set()

    def forget(self, ctx: RequestContext, replica: Replica) -> None:
        self.first_token(ctx)
        super().forget(ctx, replica)

    def _epoch(self) -> int:
        """The move watch's epoch, 0 while it is not subscribed (gateway.routing.moves)."""
        return self._watch.epoch if self._watch.live else 0

    def _confirm_pin(self, key: str, replica: str, epoch: int) -> None:
        """The store answered `replica` for the lineage, with the watch subscribed since
        before it asked (`epoch`, from before the round trip): its next turn may go first."""
        pin = self.pins.peek(key)
        if pin is not None and pin.replica == replica and epoch and epoch == self._epoch():
            pin.confirmed = epoch

    def _heard_move(self, key: str, replica: str) -> None:
        """Another gateway wrote the lineage's pin (or retired it): its next turn here waits."""
        pin = self.pins.peek(key)
        if pin is not None and pin.replica != replica:
            pin.confirmed = 0

    async def settle(self) -> None:
        """Wait for the fetches of pinned turns already sent, and the reports that waited for
        them (tests, shutdown)."""
        while self._confirming:
            await asyncio.gather(*self._confirming.values(), return_exceptions=True)
            await asyncio.sleep(0)  # the reports' callbacks

    def _apply(self, ctx: RequestContext, key: str, snapshot: Snapshot, now: float) -> None:
        """The store's state into the local tables: they are the fallback's knowledge."""
        if snapshot.counts is not None:
            self._take_counts(snapshot.now_ms, snapshot.counts)
        stored = snapshot.pin
        ours = stored is not None and self._unsent_is_newer(key, stored)
        if stored is not None and not ours:
            self.pins.adopt(
                key,
                stored.replica,
                now,
                kind=stored.kind,
                last_prompt_tokens=stored.last_prompt_tokens,
                images=stored.images,
            )
        if snapshot.session is not None and ctx.session_key is not None:
            info = self.sessions.touch(ctx.session_key, now)
            info.main = snapshot.session.main
            info.main_head = snapshot.session.main_head
            info.main_tools = snapshot.session.main_tools
            info.replica = snapshot.session.replica
            main = snapshot.main_pin
            if main is not None and info.main is not None:
                self.pins.adopt(
                    info.main,
                    main.replica,
                    now,
                    kind=main.kind,
                    last_prompt_tokens=main.last_prompt_tokens,
                    images=main.images,
                )
        if ctx.head is not None:
            for replica, age in snapshot.heads:
                self.heads.merge(ctx.head, replica, now - age)

    def _take_counts(self, now_ms: int, counts: dict[str, tuple[int, int]]) -> None:
        if self._fleet_ms - self._reorder_ms <= now_ms < self._fleet_ms:
            return  # answered after a newer count
        self._fleet, self._fleet_ms = dict(counts), now_ms

    def _unsent_is_newer(self, key: str, stored: StoredPin) -> bool:
        """Whether this gateway's pin, made or moved while the store was away, stands over
        the store's (gateway.routing.write_back): its turn came later."""
        unsent = self.write_back.unsent_turn(key)
        local = self.pins.peek(key)
        if unsent is None or local is None or local.replica == stored.replica:
            self.write_back.sent(key)
            return False
        expected, turn_ms = unsent
        newer = stored.last_used_ms < turn_ms if turn_ms else stored.replica == expected
        if not newer:
            self.write_back.sent(key)
        return newer

    def _turn_ms(self, now: float) -> int:
        return 0 if self._offset_ms is None else int(now * 1000 + self._offset_ms)

    def _claim_for(
        self,
        ctx: RequestContext,
        key: str,
        pick: AffinityPick,
        snapshot: Snapshot | None,
        retired: list[str],
    ) -> Claim | None:
        pin = self.pins.peek(key)
        if pin is None:
            return None
        stored = snapshot.pin if snapshot is not None else None
        unsent = self.write_back.unsent_turn(key) is not None
        if pick.affinity == "pinned":
            in_store = stored is not None and stored.replica == pin.replica
            if snapshot is None or (in_store and not unsent):
                return None
            # A pin the store lacks (restarted, or a write that failed), or one this gateway
            # made or moved while the store was away: written through, unless another
            # gateway writes one first.
            mode = "move" if unsent else "nx"
        elif pick.affinity in ("new", "head"):
            mode = "nx"
        elif pick.affinity in ("failover", "spill"):
            mode = "move"
        else:
            return None
        session: SessionWrite | None = None
        if pick.affinity in ("new", "head") and ctx.session_key is not None:
            info = self.sessions.peek(ctx.session_key)
            if info is not None:
                session = SessionWrite(ctx.session_key, info.main, info.main_head, info.main_tools)
        return Claim(
            key,
            pin.replica,
            pin.kind,
            pin.last_prompt_tokens,
            pin.images,
            mode,
            expected=stored.replica if stored is not None else "",
            leave_behind=pick.affinity == "spill",
            session=session,
            retired=tuple(retired),
        )

    def _count_placement(
        self, key: str, pick: AffinityPick, before: Pin | None
    ) -> list[tuple[str, int, int]]:
        """This gateway's placement, counted at once, as PinTable.put counts it: until the
        claim's answer counts it in the store, and while the store is away. Returns what it
        counted (replica, live, charged), to be taken back if the request is abandoned."""
        pin = self.pins.peek(key)
        if pick.affinity not in _PLACED or pin is None or pin is before:
            return []
        counted = [(pin.replica, 1 if pin.durable else 0, 1)]
        if before is not None and before.durable and before.replica != pin.replica:
            # A spill leaves its checkpoint charged where it was.
            counted.append((before.replica, -1, 0 if pick.affinity == "spill" else -1))
        for name, live, charged in counted:
            self._bump(name, live, charged)
        return counted

    def _bump(self, name: str, live: int, charged: int) -> None:
        found = self._fleet.get(name)
        if found is not None:
            self._fleet[name] = (found[0] + live, found[1] + charged)

    def _adopt(
        self, ctx: RequestContext, key: str, pick: AffinityPick, stored: StoredPin
    ) -> AffinityPick:
        """Another gateway pinned the lineage first: this request goes where that pin is,
        unless this gateway cannot use that replica (then the next turn settles it)."""
        now = self._clock()
        name = stored.replica
        target = self._by_name.get(name)
        if target is None or not (
            target.healthy and not target.draining and target.breaker.allows(now)
        ):
            log.info(
                "lineage %s: the store pins it to %s, which this gateway cannot use; sent to %s",
                key[:12],
                name,
                pick.replica.name,
            )
            return pick
        self.pins.adopt(
            key,
            name,
            now,
            kind=stored.kind,
            last_prompt_tokens=stored.last_prompt_tokens,
            images=stored.images,
        )
        if ctx.session_key is not None:
            info = self.sessions.peek(ctx.session_key)
            if info is not None:
                info.replica = name
        pending = self._pending.get(ctx.request_id)
        if pending is not None and pending.affinity in ("head", "pinned"):
            # What this gateway promised was for the replica it chose: a head's checkpoint
            # there, or the turn it knew of there; the lineage moves, as a failover moves it.
            affinity = "new" if pending.affinity == "head" else "failover"
            self._pending[ctx.request_id] = _Pending(key, affinity, 0, pending.kind)
            self._count(affinity, pending.kind)
        # The half-open trial the pick granted is not made after all; the request holds its
        # pick (and any trial) of the replica it goes to instead.
        self._gave_back(ctx, pick.replica)
        self._took(ctx, target, now)
        log.info(
            "lineage %s: another gateway pinned it to %s first (this one chose %s)",
            key[:12],
            name,
            pick.replica.name,
        )
        return AffinityPick(target, pick.affinity, self._prefill_s(ctx, 0), pick.kind)

    # -- what the pick reads -----------------------------------------------------------------

    def _charged(self, name: str) -> int:
        found = self._fleet.get(name)
        return found[1] if found is not None else self.pins.charged(name)

    def _retire(self, key: str) -> Pin | None:
        self._retiring.append(key)
        return super()._retire(key)

    def live_sessions(self, replica: Replica) -> int:
        found = self._fleet.get(replica.name)
        return found[0] if found is not None else super().live_sessions(replica)

    # -- after the turn ----------------------------------------------------------------------

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
        confirming = self._confirming.get(ctx.request_id)
        self.first_token(ctx)
        # The replica's breaker and the pick are settled now: only what the turn tells of its
        # conversation may wait for the store.
        self._ended(ctx, replica, outcome)
        learn = functools.partial(
            self._learn, ctx, replica, outcome, prompt_tokens, cached_tokens, output
        )
        if confirming is not None and outcome is Outcome.OK:
            # A turn shorter than the store's round trip: verified once the store has answered
            # with what it promised (a retry's pick reuses the request's id, so only a finished
            # turn waits; the others have no promise to verify).
            confirming.add_done_callback(lambda _done: learn())
            return
        learn()

    def _learn(
        self,
        ctx: RequestContext,
        replica: Replica,
        outcome: Outcome,
        prompt_tokens: int,
        cached_tokens: int,
        output: TurnOutput | None,
    ) -> None:
        """Once the turn's fetch has answered (or when there is none): the turn's report
        written to the store too."""
        pending = ctx.request_id in self._pending
        super()._learn(ctx, replica, outcome, prompt_tokens, cached_tokens, output)
        if not pending or outcome is not Outcome.OK or prompt_tokens <= 0:
            return
        key = ctx.key
        pin = self.pins.peek(key) if key is not None else None
        pinned = key if pin is not None and pin.replica == replica.name else None
        # report put the head there when the engine saved, restored or passed through it.
        held = (
            ctx.head is not None
            and 0 < ctx.head_tokens < prompt_tokens
            and replica.name in self.heads.replicas(ctx.head, self._clock())
        )
        head = ctx.head if held else None
        if pinned is not None or head is not None:
            self.write_back.report(Report(pinned, replica.name, prompt_tokens, ctx.images, head))

    def head_warmed(self, head: str, replica: Replica) -> None:
        super().head_warmed(head, replica)
        # The other gateways learn where the head is with their next new lineage's fetch.
        self.write_back.report(Report(None, replica.name, 0, (), head))

    async def claim_warm(self, head: str, replica: Replica) -> bool:
        return await self._tables.claim_warm(head, replica.name)

    async def aclose(self) -> None:
        await self.settle()
        await self._watch.aclose()
        await self.write_back.aclose()
