"""Prompt-head checkpoints: where a request's declared head ends and where its prefill is cut.

Agentic clients start every session with the same long head (system prompt and tools). The
hybrid model can reuse a prefix only where a recurrent state was saved, and the stock engine
saves one only at the end of each prefill chunk and of the prompt, so every new session
prefills the head again. The gateway declares how many prompt tokens the head spans in
`sampling_params.custom_params.flashbox_head_tokens`; the patch cuts that request's prefill
at the head's aligned end so a state is saved there (see docs/prefix-cache.md).

sglang-free: the scheduler wrappers and the tree call these with the request's fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.patches.prefix_cache.alignment import align_down

# The field inside sampling_params.custom_params (the gateway's contract). Stock sglang-kt
# passes custom_params through to the scheduler's Req untouched and reads it only for a
# custom logit processor, so an engine without the patch ignores it.
HEAD_TOKENS_PARAM = "flashbox_head_tokens"

# Set on a tree node whose state is a prompt head's (the state after exactly the head's
# tokens). A node keeps its end position for life (a split moves its start, never its end),
# so the mark stays true; a node whose state was evicted keeps it and is protected again once
# a later request saves the head there.
HEAD_MARK = "_flashbox_head"


def is_head(node: object) -> bool:
    return bool(getattr(node, HEAD_MARK, False))


def declared_head_tokens(custom_params: object) -> int | None:
    """The head length a request declares, or None (absent, or not a positive integer).

    A malformed value is ignored rather than refused: the head is an optimisation, and the
    stock engine accepts the request either way.
    """
    if not isinstance(custom_params, Mapping):
        return None
    value = custom_params.get(HEAD_TOKENS_PARAM)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def head_point(custom_params: object, interval: int) -> int | None:
    """Where a head checkpoint goes: the declared head aligned down to the track interval."""
    tokens = declared_head_tokens(custom_params)
    if tokens is None:
        return None
    return align_down(tokens, interval) or None


def request_head_point(req: Any, interval: int) -> int | None:
    """`head_point` of an sglang `Req` (or None for a request-less tree lookup)."""
    sampling = getattr(req, "sampling_params", None)
    return head_point(getattr(sampling, "custom_params", None), interval)


def head_cut(prefix_len: int, end: int, point: int | None, unit: int) -> int | None:
    """Where an extend over [prefix_len, end) must stop so the head's state is saved, or None.

    The extend saves its own state at `align_down(end, unit)`; a head at that point or at or
    below the prefix (restored already, or saved by an earlier chunk) needs no cut.
    """
    if point is None:
        return None
    return point if prefix_len < point < align_down(end, unit) else None
