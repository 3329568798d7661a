"""Prompt heads: where a rendered prompt's head ends, and how many engine tokens it is.

The head is what precedes the first user turn (system prompt and tools): Claude Code sends the
same ~30k-token head in every session of one project. The engine can only reuse a prefix where
it saved a recurrent state, so the gateway tells it the head's length in tokens
(`sampling_params.custom_params.flashbox_head_tokens`, docs/prefix-cache.md) and it saves one
there; the stock engine ignores the field. The count comes from the engine's own /tokenize,
once per distinct head (a head ends before a special token, so its tokens are the prompt's
first tokens), kept in a bounded LRU; concurrent first requests with one new head share one
call.

The field is sent only once a second session has shown the head: a head checkpoint holds a slot
of the engine's small pool, and one that no other session will restore (a one-off system
prompt) would hold it for nothing; with each session's own checkpoint beside it, that halves
the sessions the pool keeps. The first session of a shared head pays its prefill as before; the
second saves the head; the rest restore it. Sightings are per gateway (a fleet's gateways each
wait for their own second session; the head's replicas themselves are shared).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.errors import GatewayError

log = logging.getLogger("gateway.core.heads")

# sampling_params.custom_params field that tells the engine where the head ends (the patch's and
# the simulator's contract, docs/prefix-cache.md).
HEAD_TOKENS_PARAM = "flashbox_head_tokens"


def prompt_head(prompt: str, user_turn_marker: str) -> str | None:
    """The prompt up to its first user turn (None: no user turn, so no head to share)."""
    if not user_turn_marker:
        return None
    end = prompt.find(user_turn_marker)
    return prompt[:end] if end > 0 else None


@dataclass(slots=True)
class _Head:
    tokens: int
    # The first session seen with the head, until a second one shows it ("shared").
    first: str | None = None
    seen: bool = False
    shared: bool = False


class HeadTokens:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._known: OrderedDict[str, _Head] = OrderedDict()
        self._counting: dict[str, asyncio.Future[int]] = {}

    def __len__(self) -> int:
        return len(self._known)

    async def count(self, digest: str, text: str, tokenize: Callable[[str], Awaitable[int]]) -> int:
        """The head's tokens (0 when the engine could not say: the request goes without)."""
        known = self._known.get(digest)
        if known is not None:
            self._known.move_to_end(digest)
            return known.tokens
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
        if tokens and digest not in self._known:
            self._known[digest] = _Head(tokens)
            while len(self._known) > self.max_entries:
                self._known.popitem(last=False)
        return tokens

    def shared(self, digest: str, session: str | None) -> bool:
        """Whether a session other than the first one seen has shown this (counted) head; a
        request without a session key counts as a session of its own."""
        head = self._known.get(digest)
        if head is None:
            return False
        if not head.shared:
            if not head.seen:
                head.seen, head.first = True, session
            elif session is None or session != head.first:
                head.shared = True
        return head.shared
