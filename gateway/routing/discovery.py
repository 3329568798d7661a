"""Where the replica list comes from. Today a static list from settings; a DNS or Kubernetes
source would implement the same protocol and call `add` as endpoints appear (routing never
moves existing pins when one does)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.routing.replica import Replica


class ReplicaSource(Protocol):
    def initial(self) -> list[Replica]: ...

    async def watch(self, add: Callable[[Replica], None]) -> None:
        """Runs for the gateway's lifetime, calling `add` for each new replica."""
        ...


class StaticReplicas:
    def __init__(self, urls: Sequence[str]) -> None:
        self._urls = list(urls)

    def initial(self) -> list[Replica]:
        return [Replica.from_url(url) for url in self._urls]

    async def watch(self, add: Callable[[Replica], None]) -> None:
        return None
