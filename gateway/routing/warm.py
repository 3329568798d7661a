"""Head warming: a shared prompt head's checkpoint on every replica, prefilled while it idles.

A new session restores its head (system prompt and tools, ~30k tokens) only on a replica that
holds the head's checkpoint, and the engine prefills one batch at a time: with the head on one
replica, a new session that arrives while that replica prefills someone else's turn waits for
it (the shape benchmark put half of such first turns 2-30 s behind another prefill), or goes
cold elsewhere and pays the head's ~22 s. So once sessions restore a head, the gateway prefills
it, with no user waiting, on each usable replica that does not hold it, at a moment when that
replica has no prefill queued: `POST /generate` with the head's text, `max_new_tokens` 0 (the
engine's own way to fill its prefix cache) and `flashbox_head_tokens`, so the patched engine
checkpoints it. A new session then has a holder to choose among the idle ones.

What it costs: one cold head prefill per replica and head (once per `routing.head_idle_ttl_s`
while sessions use the head), and a user turn that arrives at that replica during it waits
for the forward in progress (the gateway counts the warm in the replica's queued prefill,
so new lineages go elsewhere meanwhile). Bounds: only heads the engine has been seen to
restore (a verified head_hit: the stock engine saves none, and a warm there would be a wasted
prefill), only on replicas with room in their checkpoint budget (each head held is charged
like a side request's checkpoint), at most one warm per replica at a time, and the texts of
`routing.head_warm_heads` heads kept. In a fleet one gateway warms a head on a replica: the
others see it taken in the shared store (gateway.routing.fleet).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.core.heads import HEAD_TOKENS_PARAM
from gateway.errors import GatewayError
from gateway.routing import capacity
from gateway.routing.replica import Replica
from gateway.settings import RoutingSettings

log = logging.getLogger("gateway.routing.warm")


def warm_body(text: str, tokens: int) -> dict[str, Any]:
    """The /generate body that prefills a head and generates nothing: `max_new_tokens` 0 is
    SGLang's own way to fill its cache (sglang-kt answers finish_reason length 0), and the
    head field makes the patched engine save a checkpoint where the head ends."""
    return {
        "text": text,
        "sampling_params": {"max_new_tokens": 0, "custom_params": {HEAD_TOKENS_PARAM: tokens}},
        "stream": True,
        "rid": "warm-" + secrets.token_hex(8),
    }


class HeadHolders(Protocol):
    """What the warmer asks of routing (gateway.routing.affinity.AffinityPicker), and tells
    it: `warms`, whether a head will be warmed where it is missing."""

    warms: Callable[[str], bool]

    def warm_targets(self, head: str) -> list[Replica]: ...

    def head_warmed(self, head: str, replica: Replica) -> None: ...

    async def claim_warm(self, head: str, replica: Replica) -> bool: ...


# POST /generate, prefill only: the engine's meta_info of the answer.
Prefill = Callable[[Replica, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class _Head:
    text: str
    tokens: int


class HeadWarmer:
    def __init__(
        self,
        holders: HeadHolders,
        prefill: Prefill,
        settings: RoutingSettings,
        counted: Callable[[str], None],
    ) -> None:
        self._holders = holders
        self._prefill = prefill
        self._settings = settings
        self._counted = counted
        self._heads: OrderedDict[str, _Head] = OrderedDict()
        # Replica name -> its warm in progress (one at a time each).
        self._warming: dict[str, asyncio.Task[None]] = {}
        # (head, replica) -> until when another gateway of the fleet has that warm.
        self._elsewhere: dict[tuple[str, str], float] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        holders.warms = self.warms

    def warms(self, head: str) -> bool:
        """Whether the head will be prefilled where it is missing (it was offered and is
        kept): routing lets its one holder take new sessions past its share meanwhile."""
        return self.enabled and head in self._heads

    @property
    def enabled(self) -> bool:
        s = self._settings
        return s.head_warm and s.prompt_heads and s.policy == "flashbox"

    def offer(self, head: str, text: str, tokens: int) -> None:
        """A head the engine was asked to save (a second session showed it): warm it where it
        is missing once sessions restore it."""
        if not self.enabled or not tokens:
            return
        if head in self._heads:
            self._heads.move_to_end(head)
        else:
            self._heads[head] = _Head(text, tokens)
            while len(self._heads) > self._settings.head_warm_heads:
                self._heads.popitem(last=False)
        self._wake.set()

    def start(self) -> None:
        if self.enabled and self._task is None:
            self._task = asyncio.create_task(self._loop(), name="head-warmer")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._warming.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._warming.clear()

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                self.sweep()
            except Exception:
                # A warm is an optimisation: a fault here must not end the loop for good.
                log.exception("head warmer: sweep failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._settings.head_warm_check_s)

    def sweep(self) -> int:
        """Start a warm on each replica that should hold an offered head and is idle; the
        most recently offered heads first. Returns how many started."""
        started = 0
        now = time.monotonic()
        for pair in [p for p, until in self._elsewhere.items() if until <= now]:
            del self._elsewhere[pair]
        for digest in reversed(self._heads):
            head = self._heads[digest]
            for replica in self._holders.warm_targets(digest):
                if replica.name in self._warming or (digest, replica.name) in self._elsewhere:
                    continue
                task = asyncio.create_task(self._warm(digest, head, replica))
                self._warming[replica.name] = task
                task.add_done_callback(functools.partial(self._done, replica.name))
                started += 1
        return started

    def _done(self, name: str, _task: asyncio.Task[None]) -> None:
        self._warming.pop(name, None)

    async def _warm(self, digest: str, head: _Head, replica: Replica) -> None:
        # Counted in the replica's queue from the start: a pick meanwhile sees it busy, and the
        # next sweep does not start a second warm there.
        queued = capacity.prefill_s(head.tokens, 0, self._settings)
        replica.prefill_s += queued
        try:
            if not await self._holders.claim_warm(digest, replica):
                # Another gateway warms it (or the store did not answer): not again before
                # that warm's claim lapses.
                self._elsewhere[(digest, replica.name)] = (
                    time.monotonic() + self._settings.head_idle_ttl_s
                )
                return
            body = warm_body(head.text, head.tokens)
            started = time.perf_counter()
            try:
                meta = await self._prefill(replica, body)
            except GatewayError as exc:
                self._counted("failed")
                log.info("head %s: warming on %s failed: %s", digest[:12], replica.name, exc)
                return
            self._holders.head_warmed(digest, replica)
            self._counted("saved")
            log.info(
                "head %s: warmed on %s (%s of %d tokens cached before, %.1f s)",
                digest[:12],
                replica.name,
                meta.get("cached_tokens", "?"),
                head.tokens,
                time.perf_counter() - started,
            )
        finally:
            replica.prefill_s = max(0.0, replica.prefill_s - queued)
