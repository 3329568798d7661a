"""Token counts by rendered prompt, for the counting endpoints (gateway.core.counting).

- Known counts are kept by the prompt's SHA-256 (bounded LRU, limits.count_cache_entries): an
  agent asks again for the same prompt, and a repeated count costs the engine nothing.
  Concurrent counts of one prompt share one /tokenize call.
- At most limits.max_concurrent_counts /tokenize calls run at once per gateway; a count that
  waits limits.count_wait_s for one is refused with 429, so a flood of counts cannot take the
  engine's tokenizer from the requests that generate.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from gateway.errors import GatewayError, RateLimitError
from gateway.settings import LimitSettings

Tokenize = Callable[[str], Awaitable[int]]


class PromptCounts:
    """Known counts by prompt digest (bounded LRU), one /tokenize per prompt at a time, and
    the bound on /tokenize calls at once."""

    def __init__(self, limits: LimitSettings) -> None:
        self.max_entries = limits.count_cache_entries
        self._wait_s = limits.count_wait_s
        self._concurrency = limits.max_concurrent_counts
        self._slots = asyncio.Semaphore(limits.max_concurrent_counts)
        self._known: OrderedDict[bytes, int] = OrderedDict()
        self._counting: dict[bytes, asyncio.Future[int]] = {}

    def __len__(self) -> int:
        return len(self._known)

    async def count(self, prompt: str, tokenize: Tokenize) -> int:
        digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).digest()
        while True:
            known = self._known.get(digest)
            if known is not None:
                self._known.move_to_end(digest)
                return known
            pending = self._counting.get(digest)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not pending.cancelled() or (task is not None and task.cancelling()):
                    raise  # this request was cancelled (perhaps as the leader left too)
                # The request that was counting left before the engine answered: ask again.
        return await self._lead(digest, prompt, tokenize)

    async def _lead(self, digest: bytes, prompt: str, tokenize: Tokenize) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._counting[digest] = future
        try:
            tokens = await self._tokenize(prompt, tokenize)
        except GatewayError as exc:
            # The engine's (or the bound's) answer holds for every request counting this prompt.
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waited
            raise
        except BaseException:
            future.cancel()
            raise
        finally:
            del self._counting[digest]
        future.set_result(tokens)
        if self.max_entries > 0:
            self._known[digest] = tokens
            while len(self._known) > self.max_entries:
                self._known.popitem(last=False)
        return tokens

    async def _tokenize(self, prompt: str, tokenize: Tokenize) -> int:
        try:
            async with asyncio.timeout(self._wait_s):
                await self._slots.acquire()
        except TimeoutError:
            raise RateLimitError(
                f"{self._concurrency} token counts are running at this gateway and this one "
                f"waited {self._wait_s:g}s for a turn (limits.max_concurrent_counts); "
                "retry after the Retry-After delay.",
                code="count_busy",
                headers={"retry-after": "1"},
            ) from None
        try:
            return await tokenize(prompt)
        finally:
            self._slots.release()
