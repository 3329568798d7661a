"""Scheduler-side wrappers: the right tree for GLM, 256-aligned chunk cuts, alignment checks,
and the prefill cut at a declared prompt head (heads.py).

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
from engine.patches.prefix_cache.heads import head_cut, request_head_point

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


def _head_point(tree_cache: Any, req: Any) -> int | None:
    interval = getattr(tree_cache, "head_interval", None)
    return request_head_point(req, interval) if isinstance(interval, int) else None


def _budget(adder: Any) -> dict[str, Any]:
    return {name: getattr(adder, name) for name in _BUDGET_FIELDS if hasattr(adder, name)}


def _restore_budget(adder: Any, budget: dict[str, Any]) -> None:
    for name, value in budget.items():
        setattr(adder, name, value)


def _cut(adder: Any, req: Any, fill_ids: list[int], end: int, hit_tokens: int) -> None:
    """Make `req`'s extend this round stop at `end` and charge the budget for that much.

    The caller has given back what the stock code charged; a truncated chunk reserves no
    output tokens, as in the stock chunked path. `hit_tokens` feeds the prefill log only
    (the stock code counts the cached prefix for a new request, nothing for a later chunk).
    """
    prefix = len(req.prefix_indices)
    req.set_extend_input_len(end - prefix)
    req.fill_ids = fill_ids[:end]
    adder._update_prefill_budget(hit_tokens, end - prefix, 0)


def _close_round(adder: Any) -> None:
    """No further request joins this prefill round.

    The scheduler tracks one chunked request; a stock truncation spends the whole chunk
    budget, so no second request can be truncated in the same round. A head cut leaves
    budget over, and a second truncated request would replace ours as the chunked one (our
    request would then decode from the cut as if its prompt had ended there).
    """
    adder.rem_chunk_tokens = 0


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
        tree = partial(
            GlmMambaRadixCache, unit=unit, head_interval=self.server_args.mamba_track_interval
        )
        setattr(module, "RadixCache", tree)  # noqa: B010
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
    under sliding-window pressure. A chunk that would pass the request's declared head is
    cut at the head instead, so the state there is saved (heads.py).
    """

    def add_chunked_req(self: Any, req: Any) -> Any:
        unit = tree_unit(self.tree_cache)
        if unit is None:
            return stock(self, req)
        budget = _budget(self)
        fill_ids = req.fill_ids
        extend = req.extend_input_len
        result = stock(self, req)
        if req not in self.can_run_list:
            return result
        prefix = len(req.prefix_indices)
        stock_end = prefix + req.extend_input_len
        # The last chunk (nothing truncated) ends where the prompt ends, unaligned.
        end = stock_end if result is None else aligned_chunk_end(prefix, stock_end, unit)
        head = head_cut(prefix, end or prefix, _head_point(self.tree_cache, req), unit)
        if head is None and end == stock_end:
            return result
        _restore_budget(self, budget)
        if head is not None:
            _cut(self, req, fill_ids, head, hit_tokens=0)
            _close_round(self)
            return req
        if end is None:
            self.can_run_list.remove(req)
            req.fill_ids = fill_ids
            req.set_extend_input_len(extend)
            return req
        _cut(self, req, fill_ids, end, hit_tokens=0)
        return req

    add_chunked_req.__wrapped__ = stock  # type: ignore[attr-defined]
    return add_chunked_req


def cut_first_chunk_at_head(
    stock: Callable[[Any, Any, bool, int | None], Any],
) -> Callable[[Any, Any, bool, int | None], Any]:
    """Wrap `PrefillAdder.add_one_req`: a new request's first chunk stops at its head.

    When the extend would pass the declared head (and save its own state beyond it), the
    request becomes the round's chunked request with a chunk that ends at the head; its
    state there is saved as any chunk end's is, and the rest follows next round. A request
    the stock code did not truncate can be turned into the chunked one only while there is
    none; otherwise it runs uncut and a later request with the same head saves it.
    """

    def add_one_req(
        self: Any, req: Any, has_chunked_req: bool, truncation_align_size: int | None
    ) -> Any:
        unit = tree_unit(self.tree_cache)
        point = _head_point(self.tree_cache, req) if unit is not None else None
        if (
            unit is None
            or point is None
            or self.rem_chunk_tokens is None
            or getattr(self, "dllm_config", None) is not None
        ):
            return stock(self, req, has_chunked_req, truncation_align_size)
        budget = _budget(self)
        fill_ids = req.fill_ids
        result = stock(self, req, has_chunked_req, truncation_align_size)
        if req not in self.can_run_list:
            return result
        truncated = self.new_chunked_req is req
        if not truncated and (has_chunked_req or self.new_chunked_req is not None):
            return result
        prefix = len(req.prefix_indices)
        head = head_cut(prefix, prefix + req.extend_input_len, point, unit)
        if head is None:
            return result
        _restore_budget(self, budget)
        _cut(self, req, fill_ids, head, hit_tokens=prefix)
        self.new_chunked_req = req
        _close_round(self)
        return self.budget_state()

    add_one_req.__wrapped__ = stock  # type: ignore[attr-defined]
    return add_one_req


def check_extend_alignment(
    stock: Callable[[Any, Any, list[bool], list[int], list[int]], None],
) -> Callable[[Any, Any, list[bool], list[int], list[int]], None]:
    """Wrap `ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend` with the invariants.

    An extend that ends at the request's head saves the head: a stock branching point
    inside it (a split another conversation left below the head) would take the one
    snapshot this extend writes, so it gives way.
    """

    def prepare(
        self: Any,
        req: Any,
        track_mask: list[bool],
        track_indices: list[int],
        track_seqlens: list[int],
    ) -> None:
        unit = tree_unit(self.tree_cache)
        if unit is not None:
            prefix = len(req.prefix_indices)
            point = _head_point(self.tree_cache, req)
            branching = req.mamba_branching_seqlen
            if (
                point is not None
                and point == prefix + req.extend_input_len
                and branching is not None
                and prefix < branching < point
            ):
                req.mamba_branching_seqlen = None
        stock(self, req, track_mask, track_indices, track_seqlens)
        if unit is None:
            return
        if req.mamba_pool_idx is not None:
            check_track_slot(int(track_indices[-1]), int(req.mamba_pool_idx))
        snapshot = req.mamba_last_track_seqlen if track_mask[-1] else None
        check_extend(len(req.prefix_indices), snapshot, unit)

    prepare.__wrapped__ = stock  # type: ignore[attr-defined]
    return prepare
