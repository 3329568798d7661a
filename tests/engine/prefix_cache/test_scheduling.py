"""Scheduler side: GLM gets the hybrid-state tree, and chunk cuts land on 256-token boundaries."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.patches.prefix_cache.config import PrefixCacheConfigError
from tests.engine.prefix_cache.builders import (
    KV_PAGE,
    Pools,
    cache_params,
    global_server_args,
    pools,
    server_args,
    wheel,
)


def _scheduler(args: Any, p: Pools) -> Any:
    """The fields `Scheduler.init_cache_with_memory_pool` reads, for a GLM model runner."""
    runner = SimpleNamespace(hybrid_gdn_config=None, mamba2_config=None, hisparse_coordinator=None)
    worker = SimpleNamespace(
        is_hybrid_swa=False,
        model_runner=runner,
        get_memory_pool=lambda: (p.req_to_token, p.allocator),
    )
    return SimpleNamespace(
        server_args=args,
        tp_worker=worker,
        page_size=KV_PAGE,
        spec_algorithm=SimpleNamespace(is_eagle=lambda: False),
        tp_cpu_group=None,
        attn_tp_cpu_group=None,
        enable_metrics=False,
        enable_kv_cache_events=False,
        pp_rank=0,
        pp_size=1,
        enable_hierarchical_cache=False,
        enable_hisparse=False,
    )


def test_stock_scheduler_builds_a_plain_radix_tree_for_glm() -> None:
    # The silent-corruption case the patch exists for: no hybrid state in the tree at all.
    Scheduler = wheel("sglang.srt.managers.scheduler").Scheduler
    RadixCache = wheel("sglang.srt.mem_cache.radix_cache").RadixCache

    args = server_args(disable_radix_cache=False)
    sched = _scheduler(args, pools())
    with global_server_args(args):
        Scheduler.init_cache_with_memory_pool(sched)
    assert type(sched.tree_cache) is RadixCache
    assert not sched.tree_cache.supports_mamba()


def test_opted_in_scheduler_builds_the_glm_hybrid_state_tree(glm_args: Any) -> None:
    from engine.patches.prefix_cache.tree import GlmMambaRadixCache

    Scheduler = wheel("sglang.srt.managers.scheduler").Scheduler
    RadixCache = wheel("sglang.srt.mem_cache.radix_cache").RadixCache

    sched = _scheduler(glm_args, pools())
    Scheduler.init_cache_with_memory_pool(sched)

    assert isinstance(sched.tree_cache, GlmMambaRadixCache)
    assert sched.tree_cache.tree_unit == 256
    assert sched.tree_cache.kv_page_size == KV_PAGE
    assert sched.tree_cache.head_interval == glm_args.mamba_track_interval
    assert sched.is_hybrid_ssm is True
    module = wheel("sglang.srt.managers.scheduler")

    assert module.RadixCache is RadixCache  # swapped only for the call


def test_a_scheduler_branch_other_than_the_radix_tree_fails_closed(glm_args: Any) -> None:
    Scheduler = wheel("sglang.srt.managers.scheduler").Scheduler

    glm_args.disable_radix_cache = True  # as if something later turned it off again
    sched = _scheduler(glm_args, pools())
    with pytest.raises(PrefixCacheConfigError, match="built ChunkCache"):
        Scheduler.init_cache_with_memory_pool(sched)


def test_first_chunk_cuts_are_aligned_to_the_unit(glm_args: Any) -> None:
    Scheduler = wheel("sglang.srt.managers.scheduler").Scheduler

    sched = SimpleNamespace(server_args=glm_args)
    Scheduler.init_deterministic_inference_config(sched)
    assert sched.truncation_align_size == 256


class _Req:
    """The fields PrefillAdder.add_chunked_req reads and writes, with the real length setter."""

    def __init__(self, prefix: int, total: int) -> None:
        Req = wheel("sglang.srt.managers.schedule_batch").Req

        self._set = Req.set_extend_input_len
        self.prefix_indices = torch.arange(prefix)
        self.fill_ids = list(range(total))
        self.logprob_start_len = -1
        self.sampling_params = SimpleNamespace(max_new_tokens=64)
        self.extend_input_len = total - prefix

    def set_extend_input_len(self, n: int) -> None:
        self._set(self, n)


def _adder(p: Pools, tree: Any, offset: int) -> Any:
    PrefillAdder = wheel("sglang.srt.managers.schedule_policy").PrefillAdder

    adder = PrefillAdder(KV_PAGE, tree, p.allocator, None, 1.0, 1 << 20, 8192)
    adder.rem_total_token_offset = offset
    adder.cur_rem_token_offset = offset
    return adder


def _glm_tree(p: Pools) -> Any:
    from engine.patches.prefix_cache.tree import GlmMambaRadixCache

    return GlmMambaRadixCache(cache_params(p))


@pytest.mark.usefixtures("glm_args")
def test_a_budget_bound_chunk_cut_moves_back_to_the_unit() -> None:
    p = pools(kv_tokens=20 * KV_PAGE)  # 1280 free tokens
    adder = _adder(p, _glm_tree(p), offset=100)  # 1180 tokens of budget
    req = _Req(prefix=512, total=4000)

    assert adder.add_chunked_req(req) is req
    # Stock would stop at 512 + 1180 = 1692; the next snapshot would then be unaligned.
    assert len(req.prefix_indices) + req.extend_input_len == 1536
    assert len(req.fill_ids) == 1536
    assert adder.can_run_list == [req]
    assert adder.rem_chunk_tokens == 8192 - 1024
    assert adder.rem_total_token_offset == 100 + 1024


@pytest.mark.usefixtures("glm_args")
def test_the_stock_cut_is_kept_for_other_trees() -> None:
    MambaRadixCache = wheel("sglang.srt.mem_cache.mamba_radix_cache").MambaRadixCache

    p = pools(kv_tokens=20 * KV_PAGE)
    adder = _adder(p, MambaRadixCache(cache_params(p)), offset=100)
    req = _Req(prefix=512, total=4000)
    adder.add_chunked_req(req)
    assert len(req.prefix_indices) + req.extend_input_len == 1692


@pytest.mark.usefixtures("glm_args")
def test_when_not_one_unit_fits_the_chunk_waits_with_its_budget_untouched() -> None:
    p = pools(kv_tokens=20 * KV_PAGE)
    adder = _adder(p, _glm_tree(p), offset=1080)  # 200 tokens of budget
    req = _Req(prefix=512, total=4000)

    assert adder.add_chunked_req(req) is req
    assert adder.can_run_list == []
    assert req.extend_input_len == 4000 - 512
    assert len(req.fill_ids) == 4000
    assert adder.rem_chunk_tokens == 8192
    assert adder.rem_total_token_offset == 1080


@pytest.mark.usefixtures("glm_args")
def test_the_last_chunk_ends_where_the_prompt_ends() -> None:
    p = pools(kv_tokens=20 * KV_PAGE)
    adder = _adder(p, _glm_tree(p), offset=0)
    req = _Req(prefix=512, total=1100)

    assert adder.add_chunked_req(req) is None
    assert req.extend_input_len == 1100 - 512
