"""Fair shares of each engine replica's running slots (docs/fairness.md).

The engine runs at most `max_running_requests` requests at once and queues the rest in arrival
order, so one client with many streams open would make everyone else wait behind all of them.
The gateway keeps the engine's own queue empty instead: a request routed to a replica whose
running slots (as this gateway fills them) are all taken waits here, and each slot that frees
goes to the next request by

1. priority: the highest band first (`fairness.keys.<id>.priority`, plus
   `fairness.pinned_priority` for a session's pinned turn, whose checkpoint waits there);
2. within a band, start-time fair queueing across flows (API keys, or client addresses
   without keys): a flow's requests take virtual start times 1/weight apart, a flow coming
   back starts at the current virtual time, and the smallest start goes first. A key that
   floods is served in proportion to its weight; a key that sends one request at a time
   waits for at most about one slot to free;
3. arrival order for equal starts.

Routing is unchanged: a session's turn still goes to its checkpoint's replica; it only waits
its fair turn there. The bounds are explicit: a flow with `max_queued_per_key` requests waiting
(a key's own `max_queued`), or a gateway with `max_queued`, is answered 429 with Retry-After at
once; a request that waited `max_wait_s` gets 503 with Retry-After (a stream, whose answer
started while it waited, gets the face's error event instead). The slot is held until the
request is over, as the engine holds it.

With a shared store, a replica's slots are split among the fleet's gateways by their demand
(gateway.fair_shares) and the capacity this gateway fills is its share; each gateway still
orders its own queue.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.errors import GatewayError, NoReplicaError, RateLimitError
from gateway.observability.metrics import Metrics
from gateway.settings import FairnessSettings

# How a flow is shown in metrics: a configured key's id, else one label for every client
# address (addresses are unbounded; a metric label must not be).
ANONYMOUS = "anonymous"


@dataclass(eq=False, slots=True)
class Slot:
    """One request's claim on a running slot at one replica."""

    replica: str
    flow: str
    priority: int
    label: str
    arrived: float
    start: float = 0.0
    granted: bool = False
    # Released, timed out or cancelled: a heap entry left behind is skipped.
    done: bool = False
    waiter: asyncio.Future[None] | None = None


@dataclass(slots=True)
class _Flow:
    """A flow with requests waiting at one replica."""

    waiting: int = 0
    # The virtual time at which this flow's next request starts (its last one's finish).
    finish: float = 0.0


@dataclass(slots=True)
class _Replica:
    running: int = 0
    # Running and waiting requests by flow: this gateway's demand on the replica, which a
    # fleet's shares are drawn from (gateway.fair_shares).
    wanted: dict[str, int] = field(default_factory=dict)
    # (-priority, start, sequence, slot): the next slot to hand out is the smallest.
    heap: list[tuple[int, float, int, Slot]] = field(default_factory=list)
    # Each priority band keeps its own virtual clock and flows: serving a higher band must
    # not move a lower band's clock past that band's own backlog.
    flows: dict[tuple[int, str], _Flow] = field(default_factory=dict)
    virtual: dict[int, float] = field(default_factory=dict)
    waiting: int = 0


class FairSlots:
    """The running slots of every replica this gateway sends to, and their fair queues."""

    def __init__(
        self,
        settings: FairnessSettings,
        metrics: Metrics,
        capacity: Callable[[str], int],
        *,
        service_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        # A replica's running slots (what its /server_info reports, else routing's setting).
        self._capacity = capacity
        # Engine seconds a request holds its slot, for the Retry-After of a refusal.
        self._service_s = service_s
        self._clock = clock
        self._replicas: dict[str, _Replica] = {}
        # Requests waiting per flow, over every replica (a key's share of the queue).
        self._flow_waiting: dict[str, int] = {}
        self._waiting = 0
        self._sequence = itertools.count()
        # While the gateway drains: what a request that waits, or would, is refused with.
        self._refusal: Callable[[], GatewayError] | None = None

    @property
    def waiting(self) -> int:
        return self._waiting

    def demand(self) -> dict[str, dict[str, int]]:
        """Requests running or waiting here, by replica and flow (gateway.fair_shares)."""
        return {name: dict(state.wanted) for name, state in self._replicas.items()}

    def running(self, replica: str) -> int:
        found = self._replicas.get(replica)
        return found.running if found is not None else 0

    # -- claiming ----------------------------------------------------------------------------

    def claim(self, replica: str, flow: str, *, pinned: bool = False) -> Slot:
        """A slot at `replica` for a request of `flow`: granted at once when one is free and
        nobody waits there, else queued (`check_room` bounds the queue). Raises the 503 while
        the gateway drains."""
        settings = self._settings
        share = settings.keys.get(flow)
        priority = share.priority if share is not None else 0
        if pinned:
            priority += settings.pinned_priority
        slot = Slot(replica, flow, priority, self._label(flow), self._clock())
        if not settings.enabled:
            slot.granted = True
            return slot
        if self._refusal is not None:
            raise self._refusal()
        state = self._replicas.get(replica)
        if state is None:
            state = self._replicas[replica] = _Replica()
        if not state.waiting and state.running < self._capacity(replica):
            state.wanted[flow] = state.wanted.get(flow, 0) + 1
            self._grant(state, slot)
            return slot
        # Asked again here: requests of one flow routed at once all passed the check before
        # routing, and a retry is routed again without it.
        self.check_room(flow)
        state.wanted[flow] = state.wanted.get(flow, 0) + 1
        flow_state = state.flows.get((priority, flow))
        if flow_state is None:
            flow_state = state.flows[(priority, flow)] = _Flow()
        weight = share.weight if share is not None else 1.0
        slot.start = max(state.virtual.get(priority, 0.0), flow_state.finish)
        flow_state.finish = slot.start + 1.0 / weight
        flow_state.waiting += 1
        heapq.heappush(state.heap, (-priority, slot.start, next(self._sequence), slot))
        state.waiting += 1
        self._waiting += 1
        self._flow_waiting[flow] = self._flow_waiting.get(flow, 0) + 1
        slot.waiter = asyncio.get_running_loop().create_future()
        self._metrics.child(self._metrics.fair_queue_waiting, slot.label).inc()
        return slot

    def _label(self, flow: str) -> str:
        """The flow's metric label: a key id, or one label for every unconfigured address."""
        if flow.startswith("addr:") and flow not in self._settings.keys:
            return ANONYMOUS
        return flow

    def check_room(self, flow: str) -> None:
        """Raises the 429 when `flow` has its share of the queue waiting already (a key's own
        `max_queued`, else `max_queued_per_key`), or the gateway's queue is full. Asked before
        the request is routed, so a refused request places nothing."""
        settings = self._settings
        if not settings.enabled:
            return
        share = settings.keys.get(flow)
        limit = settings.max_queued_per_key
        if share is not None and share.max_queued is not None:
            limit = share.max_queued
        flow_waiting = self._flow_waiting.get(flow, 0)
        if flow_waiting < limit and self._waiting < settings.max_queued:
            return
        reason = "key_queue_full" if flow_waiting >= limit else "queue_full"
        self._metrics.child(self._metrics.fair_queue_rejected, self._label(flow), reason).inc()
        # About when a slot frees for this flow: the requests ahead of it, served one per
        # slot-free interval (a slot's service time over the slots they wait for).
        slots = sum(self._capacity(name) for name in self._replicas) or 1
        ahead = max(1, flow_waiting if reason == "key_queue_full" else self._waiting)
        retry = max(1, math.ceil(ahead * self._service_s / slots))
        if reason == "key_queue_full":
            message = (
                f"This key has {flow_waiting} requests waiting for the engine, its share of the "
                f"queue ({limit}); retry after the Retry-After delay, or send fewer at once."
            )
        else:
            message = (
                f"The gateway's queue for the engine is full ({settings.max_queued} requests "
                "waiting); retry after the Retry-After delay."
            )
        raise RateLimitError(message, code=reason, headers={"retry-after": str(retry)})

    async def wait(self, slot: Slot) -> None:
        """Until `slot` is granted; raises the 503 after `max_wait_s`, and gives the place up
        when cancelled (the client left)."""
        if slot.granted:
            return
        if slot.waiter is None or slot.done:
            if self._refusal is not None:
                raise self._refusal()
            raise NoReplicaError("The request's place in the queue is gone.")
        try:
            async with asyncio.timeout(self._settings.max_wait_s):
                await asyncio.shield(slot.waiter)
        except TimeoutError:
            if slot.granted:
                return  # granted as the deadline passed: it goes
            self.release(slot)
            self._metrics.child(self._metrics.fair_queue_rejected, slot.label, "timeout").inc()
            raise NoReplicaError(
                f"The request waited {self._settings.max_wait_s:g}s for a running slot on the "
                "engine; retry after the Retry-After delay.",
                code="queue_timeout",
                headers={"retry-after": str(max(1, math.ceil(self._service_s)))},
            ) from None
        except BaseException:
            self.release(slot)
            raise

    # -- giving back ---------------------------------------------------------------------------

    def release(self, slot: Slot) -> None:
        """The request is over (or gave its place up): its slot goes to the next in line.
        Safe to call more than once."""
        if slot.done:
            return
        slot.done = True
        if not self._settings.enabled:
            return
        state = self._replicas.get(slot.replica)
        if state is None:
            return
        left = state.wanted.get(slot.flow, 0) - 1
        if left > 0:
            state.wanted[slot.flow] = left
        else:
            state.wanted.pop(slot.flow, None)
        if slot.granted:
            state.running -= 1
            self._hand_on(slot.replica, state)
        else:
            self._left_queue(state, slot)
            if slot.waiter is not None and not slot.waiter.done():
                slot.waiter.cancel()
            if len(state.heap) > 2 * state.waiting + 64:
                # Places given up stay in the heap until popped: bounded by the queue.
                state.heap = [entry for entry in state.heap if not entry[3].done]
                heapq.heapify(state.heap)
        if not state.running and not state.waiting:
            del self._replicas[slot.replica]

    def _hand_on(self, replica: str, state: _Replica) -> None:
        capacity = self._capacity(replica)
        while state.heap and state.running < capacity:
            _, start, _, slot = heapq.heappop(state.heap)
            if slot.done:
                continue
            state.virtual[slot.priority] = max(state.virtual.get(slot.priority, 0.0), start)
            self._left_queue(state, slot)
            self._grant(state, slot)
            metrics = self._metrics
            metrics.child(metrics.fair_queue_wait_seconds, slot.label).observe(
                self._clock() - slot.arrived
            )
            if slot.waiter is not None and not slot.waiter.done():
                slot.waiter.set_result(None)
        if not state.waiting:
            # Nobody waits: the virtual clocks start over (what is left in the heap was given up).
            state.heap.clear()
            state.virtual.clear()

    def _grant(self, state: _Replica, slot: Slot) -> None:
        slot.granted = True
        state.running += 1

    def _left_queue(self, state: _Replica, slot: Slot) -> None:
        state.waiting -= 1
        self._waiting -= 1
        left = self._flow_waiting[slot.flow] - 1
        if left:
            self._flow_waiting[slot.flow] = left
        else:
            del self._flow_waiting[slot.flow]
        flow_state = state.flows.get((slot.priority, slot.flow))
        if flow_state is not None:
            flow_state.waiting -= 1
            if not flow_state.waiting:
                # Forgotten once it has nobody waiting (the table stays as small as the queue):
                # when it comes back it starts at the virtual time then, as a new flow does.
                del state.flows[(slot.priority, slot.flow)]
        self._metrics.child(self._metrics.fair_queue_waiting, slot.label).dec()

    def capacity_changed(self, replica: str) -> None:
        """A replica reported more running slots (or came back): hand out what is free."""
        state = self._replicas.get(replica)
        if state is not None:
            self._hand_on(replica, state)

    def refuse_waiting(self, error: Callable[[], GatewayError]) -> None:
        """The gateway drains: what waits, and what would, gets an `error()` of its own."""
        self._refusal = error
        for state in self._replicas.values():
            for _, _, _, slot in state.heap:
                if slot.done:
                    continue
                if slot.waiter is not None and not slot.waiter.done():
                    slot.waiter.set_exception(error())
