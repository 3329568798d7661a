"""Rendezvous (highest-random-weight) hashing: every gateway ranks replicas the same way for a
key, without shared state; adding a replica only takes the keys it now ranks first, and removing
one moves only its own keys, each to its next choice."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TypeVar

from gateway.routing.replica import Replica

R = TypeVar("R", bound=Replica)


def score(key: str, replica_name: str) -> int:
    digest = hashlib.blake2b(f"{key}\0{replica_name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def ranked(key: str, replicas: Iterable[R]) -> list[R]:
    """Replicas from the key's first choice to its last."""
    return sorted(replicas, key=lambda r: score(key, r.name), reverse=True)
