"""The bounded store behind `store: true`, `previous_response_id` and GET/DELETE /v1/responses.

Entries and bytes are capped and entries expire after a TTL; the oldest are evicted first. An
entry keeps the response object (what GET returns) and the conversation that led to it (its
input items and its output items), which a request naming it as `previous_response_id`
continues. Codex sends `store: false` and replays its history, so it never fills this.
`StoredResponses` puts the fleet's shared store behind it when there is one (state_url).

An entry belongs to the key that made it (its key id, gateway.auth.Caller; None when no keys
are configured): a look-up by any other key finds nothing, exactly as for an id never stored,
so GET, DELETE and previous_response_id answer another key's id as they answer a missing one.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from gateway.observability.metrics import Metrics
from gateway.settings import ResponsesSettings
from gateway.shared_state import SharedStore


@dataclass(frozen=True, slots=True)
class StoredResponse:
    response: dict[str, Any]
    conversation: list[Any]  # input items then output items
    size: int
    stored_at: float
    owner: str | None = None  # the key id that made it; None: no keys configured


class ResponseStore:
    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(
        self, response: dict[str, Any], conversation: list[Any], owner: str | None = None
    ) -> bool:
        """Store it for `owner`; False when it alone is over the byte cap (then nothing is
        kept)."""
        size = len(orjson.dumps(response)) + len(orjson.dumps(conversation))
        if size > self._max_bytes:
            return False
        self._expire()  # so what the size says is only what can still be read
        response_id = str(response["id"])
        self.delete(response_id)
        self._entries[response_id] = StoredResponse(
            response, conversation, size, self._clock(), owner
        )
        self.bytes += size
        while len(self._entries) > self._max_entries or self.bytes > self._max_bytes:
            self._evict_oldest()
        return True

    def get(self, response_id: str, owner: str | None = None) -> StoredResponse | None:
        """The entry, when `owner` made it."""
        self._expire()
        entry = self._entries.get(response_id)
        return entry if entry is not None and entry.owner == owner else None

    def delete(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is None:
            return False
        self.bytes -= entry.size
        return True

    def _evict_oldest(self) -> None:
        _, entry = self._entries.popitem(last=False)
        self.bytes -= entry.size

    def _expire(self) -> None:
        deadline = self._clock() - self._ttl_s
        while self._entries:
            oldest = next(iter(self._entries.values()))
            if oldest.stored_at >= deadline:
                return
            self._evict_oldest()


# KEYS: the entry, the index (a sorted set of ids by the time they were stored). ARGV: id,
# entry, TTL ms, most entries, the entries' key prefix. Stores the entry with its TTL, drops
# from the index what has expired, then the oldest entries past the bound (and their keys).
# The store's clock, so gateways with skewed clocks agree on what is oldest.
_PUT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do
    redis.call('DEL', ARGV[5] .. old)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
"""


class StoredResponses:
    """What the Responses face reads and writes: this gateway's ResponseStore and, with
    state_url, the fleet's shared store (docs/fleet.md), so `previous_response_id` and
    GET/DELETE work through any gateway.

    A response is put in the local store at once (a follow-up through this gateway finds it
    even before the shared write lands) and written to the shared store; once that write
    succeeds the local copy is dropped, so a DELETE through another gateway is the last word.
    What stays local: writes the store refused or missed (it was unreachable), and entries over
    `shared_max_entry_bytes`. Reads try local, then the store. The shared store is bounded as
    the local one: each entry expires after `store_ttl_s`; at most `store_max_entries` are kept
    (an index of ids by age, trimmed on each write: oldest first); each entry is at most
    `shared_max_entry_bytes`. The byte total there is thus at most entries x that bound.
    """

    def __init__(
        self,
        local: ResponseStore,
        metrics: Metrics,
        shared: SharedStore | None = None,
        *,
        settings: ResponsesSettings | None = None,
    ) -> None:
        self.local = local
        self._metrics = metrics
        self._shared = shared
        settings = settings or ResponsesSettings()
        self._ttl_ms = max(1, round(settings.store_ttl_s * 1000))
        self._max_entries = settings.store_max_entries
        self._max_entry_bytes = settings.shared_max_entry_bytes
        # Shared writes in flight, kept referenced until done.
        self._writes: set[asyncio.Task[None]] = set()
        self._put = None if shared is None else shared.client.register_script(_PUT)

    @classmethod
    def build(
        cls, settings: ResponsesSettings, metrics: Metrics, shared: SharedStore | None
    ) -> StoredResponses:
        local = ResponseStore(
            max_entries=settings.store_max_entries,
            max_bytes=settings.store_max_bytes,
            ttl_s=settings.store_ttl_s,
        )
        return cls(local, metrics, shared, settings=settings)

    def put(
        self, response: dict[str, Any], conversation: list[Any], owner: str | None = None
    ) -> asyncio.Task[None] | None:
        """Store a response for `owner` (a key id); the shared write it started (None: none),
        to wait for if need be."""
        kept = self.local.put(response, conversation, owner)
        self._gauge()
        metrics = self._metrics
        shared, script = self._shared, self._put
        if shared is None or script is None or self._max_entries == 0:
            metrics.child(metrics.response_store_writes, "local").inc()
            return None
        blob = orjson.dumps({"response": response, "conversation": conversation, "owner": owner})
        if len(blob) > self._max_entry_bytes:
            metrics.child(metrics.response_store_writes, "local_too_large").inc()
            return None
        task = asyncio.get_running_loop().create_task(
            self._write(shared, script, str(response["id"]), blob, kept)
        )
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        return task

    async def _write(
        self,
        shared: SharedStore,
        script: AsyncScript,
        response_id: str,
        blob: bytes,
        kept_locally: bool,
    ) -> None:
        keys = [shared.key("response", response_id), shared.key("responses")]
        prefix = shared.key("response", "")
        args: list[bytes | str | int] = [response_id, blob, self._ttl_ms, self._max_entries, prefix]
        done = await shared.run(
            "response_put", lambda client: script(keys=keys, args=args, client=client)
        )
        metrics = self._metrics
        if done is None:
            metrics.child(metrics.response_store_writes, "local").inc()
            return
        metrics.child(metrics.response_store_writes, "shared").inc()
        if kept_locally:
            self.local.delete(response_id)
            self._gauge()

    async def get(self, response_id: str, owner: str | None = None) -> StoredResponse | None:
        """The response, when `owner` (a key id; None: no keys) made it."""
        found = self.local.get(response_id, owner)
        self._gauge()  # the look-up may have expired entries
        shared = self._shared
        if found is not None or shared is None:
            return found
        key = shared.key("response", response_id)
        blob = await shared.run("response_get", lambda client: client.get(key))
        if not isinstance(blob, bytes):
            return None
        entry = orjson.loads(blob)
        # An entry written before owners were kept has none: only a keyless gateway reads it.
        if entry.get("owner") != owner:
            return None
        return StoredResponse(
            entry["response"], entry["conversation"], len(blob), time.monotonic(), owner
        )

    async def delete(self, response_id: str) -> bool:
        """Deletes it here and in the shared store; True when it was in either. With the store
        unreachable only the local copy goes (documented in docs/fleet.md)."""
        deleted = self.local.delete(response_id)
        self._gauge()
        shared = self._shared
        if shared is None:
            return deleted
        keys = (shared.key("response", response_id), shared.key("responses"))

        async def remove(client: Redis) -> list[Any]:
            pipe = client.pipeline(transaction=True)
            pipe.delete(keys[0])
            pipe.zrem(keys[1], response_id)
            result: list[Any] = await pipe.execute()
            return result

        done = await shared.run("response_delete", remove)
        return deleted or bool(done and done[0])

    def _gauge(self) -> None:
        """This gateway's store in the metrics, after anything that may have changed it."""
        metrics = self._metrics
        metrics.response_store_entries.set(len(self.local))
        metrics.response_store_bytes.set(self.local.bytes)
