"""The bounded store behind `store: true`, `previous_response_id` and GET/DELETE /v1/responses.

Entries and bytes are capped and entries expire after a TTL; the oldest are evicted first. An
entry keeps the response object (what GET returns) and the conversation that led to it (its
input items and its output items), which a request naming it as `previous_response_id`
continues. Codex sends `store: false` and replays its history, so it never fills this.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class StoredResponse:
    response: dict[str, Any]
    conversation: list[Any]  # input items then output items
    size: int
    stored_at: float


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

    def put(self, response: dict[str, Any], conversation: list[Any]) -> bool:
        """Store it; False when it alone is over the byte cap (then nothing is kept)."""
        size = len(orjson.dumps(response)) + len(orjson.dumps(conversation))
        if size > self._max_bytes:
            return False
        self._expire()  # so what the size says is only what can still be read
        response_id = str(response["id"])
        self.delete(response_id)
        self._entries[response_id] = StoredResponse(response, conversation, size, self._clock())
        self.bytes += size
        while len(self._entries) > self._max_entries or self.bytes > self._max_bytes:
            self._evict_oldest()
        return True

    def get(self, response_id: str) -> StoredResponse | None:
        self._expire()
        return self._entries.get(response_id)

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
