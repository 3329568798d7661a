"""The routing tables in the shared store (docs/fleet.md): what several gateways must agree on.

Keys, under `state.key_prefix` (P):

- `P pin:<lineage>`: hash {r: replica, k: kind, t: last prompt tokens, i: image digests, u:
  last use (ms)}; idle TTL `routing.pin_idle_ttl_s`, renewed by every turn's report.
- `P session:<session>`: hash {m: main lineage, h: its head, tl: it has tools, r: where the
  session last placed a lineage}; TTL `routing.pin_idle_ttl_s`.
- `P head:<digest>`: sorted set, replica -> last save or restore (ms); TTL
  `routing.head_idle_ttl_s`, members past it trimmed.
- `P live:<replica>`: sorted set, durable lineage pinned there -> last use (ms).
- `P left:<replica>`: sorted set, checkpoint left there (a spilled, retired or side lineage,
  `head:<digest>`) -> when (ms).
- `P warm:<digest>:<replica>`: the gateway warming that head there (gateway.routing.warm);
  SET NX, TTL `routing.head_idle_ttl_s`.

The two per-replica sets are the budget accounting of gateway.routing.pins, fleet-wide: a
replica's charged count is its live lineages plus what was left there no earlier than its
oldest live lineage's last use. Both are trimmed by score (idle TTL, oldest live) and by rank
(`routing.pin_table_size`), and expire with the pins.

Each operation is one Lua script (gateway.routing.store_scripts), so one round trip and
atomic: `fetch` reads what a pick needs, `claim` writes a placement only if no other gateway
made one first (else it answers the winner's replica), `report` records a turn (its prompt
tokens, its pin's last use and idle TTL, its prompt head); the next fetch carries the reports
waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.routing.store_scripts import CLAIM_LUA, FETCH_LUA, REPORT_LUA
from gateway.settings import RoutingSettings
from gateway.shared_state import SharedStore

log = logging.getLogger("gateway.routing.shared_tables")


@dataclass(frozen=True, slots=True)
class StoredPin:
    replica: str
    kind: str
    last_prompt_tokens: int
    images: tuple[str, ...]
    # The store's clock, ms: its latest reported turn (or when it was placed).
    last_used_ms: int = 0


@dataclass(frozen=True, slots=True)
class StoredSession:
    main: str | None
    main_head: str | None
    main_tools: bool
    replica: str | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one pick needs, as the store holds it."""

    # The store's clock when it answered, ms.
    now_ms: int
    pin: StoredPin | None
    session: StoredSession | None
    # The session's main lineage's pin (for the kind of a tool-less newcomer, and retirement).
    main_pin: StoredPin | None
    # Replicas holding the head's checkpoint, with its age in seconds.
    heads: tuple[tuple[str, float], ...]
    # Replica -> (live durable lineages, charged checkpoints), fleet-wide; None: not counted.
    counts: dict[str, tuple[int, int]] | None


@dataclass(frozen=True, slots=True)
class SessionWrite:
    key: str
    main: str | None
    main_head: str | None
    main_tools: bool


@dataclass(frozen=True, slots=True)
class Claim:
    key: str
    replica: str
    kind: str
    last_prompt_tokens: int
    images: tuple[str, ...]
    mode: str  # nx, move or newer (CLAIM_LUA)
    expected: str = ""
    leave_behind: bool = False
    # For `newer`: when this gateway's turn was, on the store's clock (ms).
    turn_ms: int = 0
    session: SessionWrite | None = None
    retired: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Claimed:
    # won: written; same: another gateway had pinned it there; adopted: it had pinned it
    # elsewhere, and that pin stands.
    status: str
    pin: StoredPin
    # As in Snapshot, counted after the claim.
    now_ms: int
    counts: dict[str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Report:
    """A turn that ended: its prompt tokens where its lineage is pinned (`key`; None: not to
    be recorded), and its prompt head's checkpoint there (`head`; None: none)."""

    key: str | None
    replica: str
    prompt_tokens: int
    images: tuple[str, ...]
    head: str | None


class SharedRoutingTables:
    def __init__(self, store: SharedStore, settings: RoutingSettings) -> None:
        self._store = store
        self.store = store
        self._pin_ttl_ms = int(settings.pin_idle_ttl_s * 1000)
        self._head_ttl_ms = int(settings.head_idle_ttl_s * 1000)
        self._cap = settings.pin_table_size
        self._fetch = store.client.register_script(FETCH_LUA)
        self._claim = store.client.register_script(CLAIM_LUA)
        self._report = store.client.register_script(REPORT_LUA)

    @property
    def timeout_s(self) -> float:
        return self._store.settings.timeout_s

    @property
    def retry_s(self) -> float:
        """How long the store is skipped after a round trip failed (gateway.shared_state)."""
        return self._store.settings.retry_s

    async def prepare(self) -> None:
        """Load the scripts (and open a connection) before the first request needs them: a
        script the server does not know costs two more round trips within one request's
        bound. A store that does not answer now is left to the requests (they route on
        local state meanwhile)."""
        try:
            async with asyncio.timeout(self._store.settings.connect_timeout_s):
                for script in (self._fetch, self._claim, self._report):
                    await self._store.client.script_load(script.script)
        except (TimeoutError, RedisError, OSError) as exc:
            log.warning("shared store: routing scripts not loaded at start (%s)", exc)

    async def fetch(
        self,
        key: str,
        session: str | None,
        head: str | None,
        replicas: Sequence[str],
        *,
        count: bool = True,
        reports: Sequence[Report] = (),
    ) -> Snapshot | None:
        """The lineage's pin, and for a lineage without one its session and its
        head's replicas; the charged counts of `replicas` if `count`, or if the lineage has no
        pin on one of them (its pick will place it). `reports` are written first."""
        args: list[str | int] = [
            self._store.prefix,
            key,
            self._pin_ttl_ms,
            session or "",
            head or "",
            self._head_ttl_ms,
            "1" if count else "0",
            self._cap,
            len(replicas),
            *replicas,
            *_report_args(reports),
        ]

        async def call(client: aioredis.Redis) -> Any:
            return await self._fetch(args=args, client=client)

        raw = await self._store.run("routing_fetch", call)
        return None if raw is None else _snapshot(raw, replicas)

    async def claim(self, claim: Claim, replicas: Sequence[str] = ()) -> Claimed | None:
        """The placement, unless another gateway made one first; `replicas` counted after."""
        session = claim.session
        args: list[str | int] = [
            self._store.prefix,
            claim.key,
            self._pin_ttl_ms,
            self._cap,
            claim.replica,
            claim.kind,
            claim.last_prompt_tokens,
            ",".join(claim.images),
            claim.mode,
            claim.expected,
            "1" if claim.leave_behind else "0",
            claim.turn_ms,
            session.key if session else "",
            (session.main or "") if session else "",
            (session.main_head or "") if session else "",
            "1" if session and session.main_tools else "0",
            len(claim.retired),
            *claim.retired,
            *replicas,
        ]

        async def call(client: aioredis.Redis) -> Any:
            return await self._claim(args=args, client=client)

        raw = await self._store.run("routing_claim", call)
        if raw is None:
            return None
        pin = _pin(raw[0], raw[2], raw[3], raw[4], raw[5])
        return Claimed(_text(raw[1]), pin, int(raw[6]), _counts(raw[7], replicas))

    async def report(self, turns: Sequence[Report]) -> bool:
        args: list[str | int] = [
            self._store.prefix,
            self._pin_ttl_ms,
            self._cap,
            self._head_ttl_ms,
        ]
        args += _report_args(turns)

        async def call(client: aioredis.Redis) -> Any:
            return await self._report(args=args, client=client)

        return await self._store.run("routing_report", call) is not None

    async def claim_warm(self, head: str, replica: str) -> bool:
        """Whether this gateway is the one to warm `head` on `replica` (gateway.routing.warm):
        the first to ask within `routing.head_idle_ttl_s`. False when the store did not
        answer: an uncoordinated warm may be a second prefill of the same head."""
        key = self._store.key("warm", head, replica)

        async def call(client: aioredis.Redis) -> Any:
            return await client.set(key, "1", nx=True, px=self._head_ttl_ms)

        return bool(await self._store.run("routing_warm", call))


def _report_args(turns: Sequence[Report]) -> list[str | int]:
    args: list[str | int] = []
    for turn in turns:
        images = ",".join(turn.images)
        args += [turn.key or "", turn.replica, turn.prompt_tokens, images, turn.head or ""]
    return args


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pin(replica: Any, kind: Any, tokens: Any, images: Any, used: Any) -> StoredPin:
    digests = _text(images)
    found = tuple(digests.split(",")) if digests else ()
    return StoredPin(
        _text(replica), _text(kind), int(_text(tokens) or 0), found, int(float(_text(used)))
    )


def _snapshot(raw: Any, replicas: Sequence[str]) -> Snapshot:
    now_ms = int(raw[0])
    pin = _pin(*raw[1]) if raw[1] else None
    session: StoredSession | None = None
    if raw[2]:
        main, head, tools, where = (_text(v) for v in raw[2])
        session = StoredSession(main or None, head or None, tools == "1", where or None)
    main_pin = _pin(*raw[3]) if raw[3] else None
    flat = raw[4]
    heads = tuple(
        (_text(flat[i]), max(0.0, (now_ms - float(flat[i + 1])) / 1000))
        for i in range(0, len(flat), 2)
    )
    counts = _counts(raw[5], replicas) if raw[5] else None
    return Snapshot(now_ms, pin, session, main_pin, heads, counts)


def _counts(numbers: Any, replicas: Sequence[str]) -> dict[str, tuple[int, int]]:
    return {name: (int(numbers[2 * i]), int(numbers[2 * i + 1])) for i, name in enumerate(replicas)}
