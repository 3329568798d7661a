"""Why 256: at a 64-token split two branches write index keys into one KPool page.

The DSA indexer stores the compressed keys of 4 tokens per slot, 64 slots per page: the keys
of tokens [256g, 256g+256) all live in the physical page of token 256g. The write locations
below come from the wheel's own KPool planner (`kpool_plan`), fed with page tables made
from the prefix each tree hands back.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.engine.prefix_cache.builders import (
    KV_PAGE,
    Pools,
    cache_params,
    pools,
    wheel,
)
from tests.engine.prefix_cache.test_tree import _insert, _match, _tokens

POOL_SIZE = 4
SLOTS_PER_PAGE = 64


class _TorchWithoutPinnedMemory:
    """`torch` for kpool_plan on a CPU-only machine: pinned staging buffers need a GPU."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def tensor(self, *args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        return torch.tensor(*args, **kwargs)


@pytest.fixture
def kpool_plan(monkeypatch: pytest.MonkeyPatch) -> Any:
    module = wheel("sglang.srt.layers.attention.nsa.kpool_plan")

    monkeypatch.setattr(module, "torch", _TorchWithoutPinnedMemory())
    return module


def _write_locations(kpool_plan: Any, page_table: list[int], prefix: int, seq_len: int) -> set[int]:
    """Physical KPool slots one request's extend from `prefix` to `seq_len` writes."""
    TopkTransformMethod = wheel("sglang.srt.layers.attention.nsa_backend").TopkTransformMethod

    plan = kpool_plan._KPoolCpuPlan()
    kpool_plan._append_compress_rows(plan, POOL_SIZE, 1, [seq_len - prefix], [seq_len], [0])
    table = torch.tensor([page_table], dtype=torch.int32)
    batch = SimpleNamespace(seq_lens=torch.tensor([seq_len]))
    out = kpool_plan._kpool_plan_to_gpu(
        plan,
        batch,
        table,
        table,
        torch.zeros(0, dtype=torch.int32),
        torch.tensor([0]),
        POOL_SIZE,
        SLOTS_PER_PAGE,
        TopkTransformMethod.PAGED,
        torch.uint8,
    )
    return {int(x) for x in out.writes.write_loc}


def _pages(kv: torch.Tensor) -> list[int]:
    return [int(x) // KV_PAGE for x in kv[::KV_PAGE]]


def _branch(
    tree: Any, p: Pools, kpool_plan: Any, shared: int, state_at: int
) -> tuple[int, set[int], set[int]]:
    """Cache branch A, then prefill branch B on what the tree hands back; both are 512 tokens.

    A snapshot of the shared part exists at `state_at` tokens (where the tree's unit allows).

    Returns (B's hit, slots holding A's keys past the shared prefix, slots B writes).
    """
    prefix = _tokens(shared, seed=21)
    branch_a = [*prefix, *_tokens(512 - shared, seed=22)]
    branch_b = [*prefix, *_tokens(512 - shared, seed=23)]

    kv_a = p.allocator.alloc(512)
    pages_a = _pages(kv_a)
    keys_a = _write_locations(kpool_plan, pages_a, 0, 512)
    slot = p.req_to_token.mamba_pool.alloc(1)
    InsertParams = wheel("sglang.srt.mem_cache.base_prefix_cache").InsertParams
    RadixKey = wheel("sglang.srt.mem_cache.radix_cache").RadixKey

    tree.insert(InsertParams(key=RadixKey(branch_a), value=kv_a, mamba_value=slot))
    _insert(tree, p, prefix[:state_at], state=1.0)

    hit, _ = _match(tree, branch_b)
    MatchPrefixParams = wheel("sglang.srt.mem_cache.base_prefix_cache").MatchPrefixParams

    shared_kv = tree.match_prefix(MatchPrefixParams(key=RadixKey(branch_b[:hit]))).device_indices
    fresh = p.allocator.alloc(512 - hit)
    pages_b = _pages(torch.cat([shared_kv, fresh]))
    keys_b = _write_locations(kpool_plan, pages_b, hit, 512)
    # A's keys for the tokens B does not share (the ones B could clobber).
    a_tail = keys_a - _write_locations(kpool_plan, pages_a, 0, hit)
    return hit, a_tail, keys_b


@pytest.mark.usefixtures("glm_args")
def test_stock_64_unit_lets_a_branch_overwrite_the_other_branchs_index_keys(
    kpool_plan: Any,
) -> None:
    MambaRadixCache = wheel("sglang.srt.mem_cache.mamba_radix_cache").MambaRadixCache

    p = pools()
    hit, keys_a, keys_b = _branch(
        MambaRadixCache(cache_params(p)), p, kpool_plan, shared=320, state_at=320
    )

    assert hit == 320
    clobbered = keys_a & keys_b
    # B's keys for tokens 320..511 land in the shared page that holds A's keys for them.
    assert len(clobbered) == (512 - 320) // POOL_SIZE


@pytest.mark.usefixtures("glm_args")
def test_256_unit_refuses_the_64_aligned_split_and_keeps_pages_apart(kpool_plan: Any) -> None:
    from engine.patches.prefix_cache.tree import GlmMambaRadixCache

    p = pools()
    hit, keys_a, keys_b = _branch(
        GlmMambaRadixCache(cache_params(p)), p, kpool_plan, shared=320, state_at=256
    )

    assert hit == 256
    assert keys_a & keys_b == set()


def test_planner_puts_a_256_token_group_in_one_page(kpool_plan: Any) -> None:
    rng = random.Random(3)
    table = rng.sample(range(100), 8)
    locs = _write_locations(kpool_plan, table, 0, 512)
    assert {loc // SLOTS_PER_PAGE for loc in locs} == {table[0], table[4]}
