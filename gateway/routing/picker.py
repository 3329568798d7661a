"""Replica choice (hop 3) behind one small interface.

`pick` chooses a replica for a request; `report` tells the picker how the request went, so a
smarter picker (checkpoint-aware session affinity) can learn from outcomes. The simple picker
here takes the first healthy replica; gateway.routing.affinity has the real one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from enum import StrEnum
from typing import Protocol

from gateway.errors import NoReplicaError
from gateway.routing.replica import Replica, RequestContext


class Outcome(StrEnum):
    """How a routed request ended, as far as routing cares."""

    OK = "ok"
    CONNECT_FAILED = "connect_failed"
    UPSTREAM_ERROR = "upstream_error"
    CLIENT_GONE = "client_gone"
    # The engine refused the request itself (4xx): not the replica's fault.
    REJECTED = "rejected"


class Pick(Protocol):
    @property
    def replica(self) -> Replica: ...

    @property
    def affinity(self) -> str:
        """Bounded label for flashbox_affinity_total{outcome}."""
        ...


class ReplicaPicker(Protocol):
    @property
    def replicas(self) -> Sequence[Replica]: ...

    def pick(self, ctx: RequestContext, exclude: Collection[str] = ()) -> Pick:
        """A replica for the request, not one named in `exclude` (those failed this request)."""
        ...

    def live_sessions(self, replica: Replica) -> int:
        """Sessions pinned to the replica now (for /admin/replicas)."""
        ...

    def report(
        self,
        ctx: RequestContext,
        replica: Replica,
        outcome: Outcome,
        *,
        prompt_tokens: int = 0,
        cached_tokens: int = 0,
    ) -> None: ...


class _FirstHealthyPick:
    __slots__ = ("affinity", "replica")

    def __init__(self, replica: Replica, affinity: str) -> None:
        self.replica = replica
        self.affinity = affinity


class FirstHealthyPicker:
    """The first healthy replica in configured order; no sessions, no learning."""

    def __init__(self, replicas: Sequence[Replica]) -> None:
        self._replicas = list(replicas)

    @property
    def replicas(self) -> Sequence[Replica]:
        return self._replicas

    def live_sessions(self, replica: Replica) -> int:
        return 0

    def pick(self, ctx: RequestContext, exclude: Collection[str] = ()) -> _FirstHealthyPick:
        for replica in self._replicas:
            if replica.healthy and replica.name not in exclude:
                return _FirstHealthyPick(replica, "unpinned")
        raise NoReplicaError("No healthy engine replica is available; retry shortly.")

    def report(
        self,
        ctx: RequestContext,
        replica: Replica,
        outcome: Outcome,
        *,
        prompt_tokens: int = 0,
        cached_tokens: int = 0,
    ) -> None:
        # A refused connection means the replica is down now, not after the next probe.
        if outcome is Outcome.CONNECT_FAILED:
            replica.healthy = False
            replica.successes = 0
