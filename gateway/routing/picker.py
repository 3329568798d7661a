"""Replica choice (hop 3) behind one small interface.

`pick` chooses a replica for a request (`route` wraps it in the shared store's round trips when
gateways share routing state); `report` tells the picker how the request went, so it can learn
from outcomes. The implementation is gateway.routing.affinity (checkpoint-aware
session affinity, with consistent-hashing and round-robin policies as baselines).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gateway.routing.replica import Replica, RequestContext, TurnOutput


class Outcome(StrEnum):
    """How a routed request ended, as far as routing cares."""

    OK = "ok"
    CONNECT_FAILED = "connect_failed"
    UPSTREAM_ERROR = "upstream_error"
    CLIENT_GONE = "client_gone"
    # The engine refused the request itself (4xx): not the replica's fault.
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class Outstanding:
    """What routing holds for requests now (`ReplicaPicker.pending`): all zero when the gateway
    is idle, else something was taken and never given back."""

    # Picks routed and not yet reported or forgotten.
    picks: int = 0
    # Half-open breaker trials whose lease runs (gateway.routing.breaker).
    trials: int = 0


class Pick(Protocol):
    @property
    def replica(self) -> Replica: ...

    @property
    def affinity(self) -> str:
        """Bounded label for flashbox_affinity_total{outcome}."""
        ...

    @property
    def prefill_s(self) -> float:
        """The prefill the request adds to the replica's queue (Replica.prefill_s)."""
        ...

    @property
    def kind(self) -> str:
        """The lineage's kind: main, subagent or side (gateway.routing.lineage)."""
        ...

    @property
    def promised_tokens(self) -> int:
        """Prompt tokens the replica should serve from its checkpoints (0: none promised)."""
        ...


class ReplicaPicker(Protocol):
    @property
    def replicas(self) -> Sequence[Replica]: ...

    def pick(self, ctx: RequestContext, exclude: Collection[str] = ()) -> Pick:
        """A replica for the request, not one named in `exclude` (those failed this request)."""
        ...

    async def route(self, ctx: RequestContext, exclude: Collection[str] = ()) -> Pick:
        """`pick` with the routing state's own round trips around it (the shared store's,
        when gateways share one: gateway.routing.fleet); what the request path calls.

        Cancellation-safe: cancelled at any await inside, it gives back everything the pick
        took (its bookkeeping, a new conversation's pin and budget charge, the breaker's
        trial) before the CancelledError propagates; returned, the pick is the caller's to
        `report` or `forget`."""
        ...

    def pending(self) -> Outstanding:
        """What routing holds now: picks not yet reported or forgotten, trials leased. Cheap
        (an idle check after each test)."""
        ...

    async def prepare(self) -> None:
        """Before the first request (at start)."""
        ...

    async def aclose(self) -> None:
        """Finish what routing still has to write (at shutdown)."""
        ...

    def remove(self, name: str) -> None:
        """Drop a replica discovery forgot (gateway.routing.discovery)."""
        ...

    def live_sessions(self, replica: Replica) -> int:
        """Sessions pinned to the replica now (for /admin/replicas)."""
        ...

    def first_token(self, ctx: RequestContext) -> None:
        """The request's first token came, or it ended without one (gateway.core.run)."""
        ...

    def forget(self, ctx: RequestContext, replica: Replica) -> None:
        """The request never reached `replica`, where it was picked: what pick noted for it
        goes."""
        ...

    def report(
        self,
        ctx: RequestContext,
        replica: Replica,
        outcome: Outcome,
        *,
        prompt_tokens: int = 0,
        cached_tokens: int = 0,
        output: TurnOutput | None = None,
    ) -> None: ...
