"""Scheduler-side wrappers: the right tree for GLM, 256-aligned chunk cuts, alignment checks.

Each wrapper calls the stock function and acts only when the server args carry the GLM
opt-in (`config.UNIT_ATTR`) or the batch's tree is our `GlmMambaRadixCache`, so other models
in the same process keep the stock behaviour.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from engine.patches.prefix_cache.alignment import (
    aligned_chunk_end,
    check_extend,
    check_track_slot,
)
from engine.patches.prefix_cache.config import UNIT_ATTR, PrefixCacheConfigError

# PrefillAdder's budget counters; a chunk cut we move must give back what the stock cut took.
_BUDGET_FIELDS = (
    "rem_total_token_offset",
    "cur_rem_token_offset",
    "rem_input_tokens",
    "rem_chunk_tokens",
    "rem_swa_token_offset",
    "rem_dllm_tokens",
    "log_hit_tokens",
    "log_input_tokens",
)


def _unit(server_args: Any) -> int | None:
    unit = getattr(server_args, UNIT_ATTR, None)
    return unit if isinstance(unit, int) else None


def tree_unit(tree_cache: Any) -> int | None:
    unit = getattr(tree_cache, "tree_unit", None)
    return unit if isinstance(unit, int) else None


def build_tree_cache(stock: Callable[[Any], None]) -> Callable[[Any], None]:
    """Wrap `Scheduler.init_cache_with_memory_pool` so GLM gets the hybrid-state tree.

    Stock code treats a model as hybrid only for GDN/Mamba2 configs and would build a plain
    `RadixCache` for GLM: a prefix hit would then run KDA from a zeroed state (wrong output,
    no error). The radix-cache class the method instantiates is swapped for the duration of
    the call, and the result is checked, so any other branch it takes fails closed.
    """

    def init_cache_with_memory_pool(self: Any) -> None:
        unit = _unit(self.server_args)
        if unit is None:
            stock(self)
            return
        from engine.patches.prefix_cache.tree import GlmMambaRadixCache

        module = sys.modules[stock.__module__]
        plain = vars(module)["RadixCache"]
        setattr(module, "RadixCache", partial(GlmMambaRadixCache, unit=unit))  # noqa: B010
        try:
            stock(self)
        finally:
            setattr(module, "RadixCache", plain)  # noqa: B010
        if not isinstance(self.tree_cache, GlmMambaRadixCache):
            raise PrefixCacheConfigError(
                f"FLASHBOX_PREFIX_CACHE=1: the scheduler built {type(self.tree_cache).__name__}"
                " instead of the GLM hybrid-state tree (radix cache disabled, HiCache, SWA"
                " or the C++ radix tree are not supported)"
            )
        self.is_hybrid_ssm = True

    init_cache_with_memory_pool.__wrapped__ = stock  # type: ignore[attr-defined]
    return init_cache_with_memory_pool


def align_truncation(stock: Callable[[Any], None]) -> Callable[[Any], None]:
    """Wrap `Scheduler.init_deterministic_inference_config`: first-chunk cuts on 256 tokens."""

    def init_deterministic_inference_config(self: Any) -> None:
        stock(self)
        unit = _unit(self.server_args)
        if unit is None:
            return
        current = self.truncation_align_size
        self.truncation_align_size = unit if current is None else math.lcm(current, unit)

    init_deterministic_inference_config.__wrapped__ = stock  # type: ignore[attr-defined]
    return init_deterministic_inference_config


def align_chunk_continuation(stock: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """Wrap `PrefillAdder.add_chunked_req`, whose cut follows the token budget, not pages.

    An unaligned cut would make the next chunk's prefix, and so its snapshot, unaligned.
    The cut is moved back to the last unit boundary and the budget the stock cut took is
    given back; when not one unit fits, the request waits a round, as the stock code does
    under sliding-window pressure.
    """

    def add_chunked_req(self: Any, req: Any) -> Any:
        unit = tree_unit(self.tree_cache)
        if unit is None:
            return stock(self, req)
        budget = {name: getattr(self, name) for name in _BUDGET_FIELDS if hasattr(self, name)}
        fill_ids = req.fill_ids
        extend = req.extend_input_len
        result = stock(self, req)
        if result is None or req not in self.can_run_list:
            return result
        prefix = len(req.prefix_indices)
        end = aligned_chunk_end(prefix, prefix + req.extend_input_len, unit)
        if end == prefix + req.extend_input_len:
            return result
        for name, value in budget.items():
            setattr(self, name, value)
        if end is None:
            self.can_run_list.remove(req)
            req.fill_ids = fill_ids
            req.set_extend_input_len(extend)
            return req
        req.set_extend_input_len(end - prefix)
        req.fill_ids = fill_ids[:end]
        self._update_prefill_budget(0, end - prefix, 0)
        return req

    add_chunked_req.__wrapped__ = stock  # type: ignore[attr-defined]
    return add_chunked_req


def check_extend_alignment(
    stock: Callable[[Any, Any, list[bool], list[int], list[int]], None],
) -> Callable[[Any, Any, list[bool], list[int], list[int]], None]:
    """Wrap `ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend` with the invariants."""

    def prepare(
        self: Any,
        req: Any,
        track_mask: list[bool],
        track_indices: list[int],
        track_seqlens: list[int],
    ) -> None:
        stock(self, req, track_mask, track_indices, track_seqlens)
        unit = tree_unit(self.tree_cache)
        if unit is None:
            return
        if req.mamba_pool_idx is not None:
            check_track_slot(int(track_indices[-1]), int(req.mamba_pool_idx))
        snapshot = req.mamba_last_track_seqlen if track_mask[-1] else None
        check_extend(len(req.prefix_indices), snapshot, unit)

    prepare.__wrapped__ = stock  # type: ignore[attr-defined]
    return prepare
