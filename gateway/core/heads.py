"""Prompt heads: where a rendered prompt's head ends, and how many engine tokens it is.

The head is what precedes the first user turn (system prompt and tools): Claude Code sends the
same ~30k-token head in every session of one project. The engine can only reuse a prefix where
it saved a recurrent state, so the gateway tells it the head's length in tokens
(`sampling_params.custom_params.flashbox_head_tokens`, docs/prefix-cache.md) and it saves one
there; the stock engine ignores the field. The count comes from the engine's own /tokenize,
once per distinct head (a head ends before a special token, so its tokens are the prompt's
first tokens), kept in a bounded LRU; concurrent first requests with one new head share one
call.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from gateway.errors import GatewayError

log = logging.getLogger("gateway.core.heads")


def prompt_head(prompt: str, user_turn_marker: str) -> str | None:
    """The prompt up to its first user turn (None: no user turn, so no head to share)."""
    if not user_turn_marker:
        return None
    end = prompt.find(user_turn_marker)
    return prompt[:end] if end > 0 else None


class HeadTokens:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._known: OrderedDict[str, int] = OrderedDict()
        self._counting: dict[str, asyncio.Future[int]] = {}

    def __len__(self) -> int:
        return len(self._known)

    async def count(self, digest: str, text: str, tokenize: Callable[[str], Awaitable[int]]) -> int:
        """The head's tokens (0 when the engine could not say: the request goes without)."""
        known = self._known.get(digest)
        if known is not None:
            self._known.move_to_end(digest)
            return known
        pending = self._counting.get(digest)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._counting[digest] = future
        tokens = 0
        try:
            tokens = await tokenize(text)
        except GatewayError as exc:
            # A head checkpoint is an optimisation: the request goes on without one.
            log.info("could not count a prompt head's tokens: %s", exc)
        finally:
            del self._counting[digest]
            future.set_result(tokens)
        if tokens:
            self._known[digest] = tokens
            while len(self._known) > self.max_entries:
                self._known.popitem(last=False)
        return tokens
