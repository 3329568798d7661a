"""The pins other gateways move, heard as they move them: what lets a pinned turn go first.

A pinned turn of a fleet is sent to its replica before the store's fetch answers
(gateway.routing.fleet) only when this gateway would know of a move: every claim that writes a
pin's replica publishes `<lineage> <replica>` on the channel `<state.key_prefix>moves`
(gateway.routing.store_scripts), and this watch, subscribed on a connection of its own, marks
the local pin of each lineage another gateway moved as unconfirmed, so that lineage's next turn
waits for the fetch. A move is published before the moving gateway's request even reaches its
engine, so it arrives here long before the lineage's next turn (which follows that request's
answer).

What was published while the subscription was down is lost: each (re)subscription starts a new
`epoch`, and only pins the store confirmed within the current epoch may go first. A subscription
that stops answering its pings within `state.retry_s` is treated as down (a silent network
partition delivers nothing, and says nothing either).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.shared_state import SharedStore

log = logging.getLogger("gateway.routing.moves")


class MoveWatch:
    def __init__(self, store: SharedStore, moved: Callable[[str, str], None]) -> None:
        self._store = store
        self._moved = moved
        self._metrics = store.metrics
        self.channel = store.key("moves")
        # Starts at 1 with the first subscription; 0 is "confirmed in no epoch".
        self.epoch = 0
        self._live = False
        self._metrics.state_moves_heard.set(0)
        self._task: asyncio.Task[None] | None = None
        # Checked by the loops as well as cancelling them: Python 3.11's asyncio.timeout, which
        # redis-py reads a subscription under, can swallow a cancellation that lands as its
        # deadline passes, and the loop would go on.
        self._closing = False

    @property
    def live(self) -> bool:
        return self._live

    @live.setter
    def live(self, value: bool) -> None:
        self._live = value
        self._metrics.state_moves_heard.set(1 if value else 0)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        retry_s = self._store.settings.retry_s
        while not self._closing:
            client = self._store.subscriber()
            try:
                await self._listen(client)
            except (RedisError, OSError, TimeoutError) as exc:
                if self.live:
                    log.warning("moves: subscription lost (%s); pinned turns wait for fetches", exc)
            finally:
                self.live = False
                with contextlib.suppress(RedisError, OSError):
                    await client.aclose()
            await asyncio.sleep(retry_s)

    async def _listen(self, client: aioredis.Redis) -> None:
        settings = self._store.settings
        pubsub = client.pubsub()
        try:
            async with asyncio.timeout(max(settings.connect_timeout_s, settings.timeout_s)):
                await pubsub.subscribe(self.channel)
            answered = True
            while not self._closing:
                # Each retry_s: the last ping must have been answered, and a new one goes out.
                message = await pubsub.get_message(timeout=settings.retry_s)
                if message is None:
                    if not answered:
                        raise TimeoutError("no answer to a ping")
                    answered = False
                    await pubsub.ping()
                    continue
                kind = message["type"]
                if kind == "subscribe":
                    self.epoch += 1
                    self.live = True
                elif kind == "pong":
                    answered = True
                elif kind == "message":
                    self._heard(message["data"])
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it bare

    def _heard(self, data: bytes | str) -> None:
        text = data.decode() if isinstance(data, bytes) else data
        key, _, replica = text.partition(" ")
        self._moved(key, replica)

    async def aclose(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            # Its loops end within one get_message wait (retry_s) even if the cancel is lost.
            await asyncio.wait({self._task}, timeout=self._store.settings.retry_s * 2 + 1)
            self._task = None
        self.live = False
