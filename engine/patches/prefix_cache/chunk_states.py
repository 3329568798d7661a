"""The per-chunk KDA states `h` that GLM's extend computes and drops, kept for the one call
that asks for them.

Separate from kda.py on purpose: the hook on `sglang.srt.layers.attention.fla.kda` runs while
sglang's GLM KDA backend module is still importing it (the backend imports `fla.kda` at its
top), so this module must not import that backend. Importing it from kda.py made the hook fail
on the real wheel ("partially initialized module") and undo every prefix-cache patch; the
real server on a CPU showed it (tests/engine_cpu/test_patches_install.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import torch

# `chunk_kda` computes the per-chunk states `h` and drops them. The wrapper below hands them
# to the GLM extend call that asked for them, and only to it: a context variable rather than
# an attribute, so Kimi's KDA path (same kernel) and any other caller are untouched.
CHUNK_STATES: ContextVar[list[torch.Tensor] | None] = ContextVar(
    "flashbox_kda_chunk_states", default=None
)

FwdH = Callable[..., tuple[torch.Tensor, Any]]


def capture_chunk_states(stock: FwdH) -> FwdH:
    """Wrap `chunk_gated_delta_rule_fwd_h` as `fla.kda` calls it, keeping `h` on request."""

    def chunk_gated_delta_rule_fwd_h(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        result = stock(*args, **kwargs)
        sink = CHUNK_STATES.get()
        if sink is not None:
            sink.append(result[0])
        return result

    chunk_gated_delta_rule_fwd_h.__wrapped__ = stock  # type: ignore[attr-defined]
    return chunk_gated_delta_rule_fwd_h
