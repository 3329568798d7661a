"""The GLM tree: SGLang's hybrid-state radix tree with a 256-token unit, on real CPU pools."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.patches.prefix_cache.alignment import SnapshotAlignmentError
from tests.engine.prefix_cache.builders import (
    Pools,
    cache_params,
    fill_slot,
    pools,
    slot_values,
    wheel,
)


def _tree(p: Pools) -> Any:
    from engine.patches.prefix_cache.tree import GlmMambaRadixCache

    return GlmMambaRadixCache(cache_params(p))


def _insert(tree: Any, p: Pools, tokens: list[int], state: float) -> Any:
    """Cache `tokens` with a snapshot slot holding `state`, as a finished request would."""
    InsertParams = wheel("sglang.srt.mem_cache.base_prefix_cache").InsertParams
    RadixKey = wheel("sglang.srt.mem_cache.radix_cache").RadixKey

    slot = p.req_to_token.mamba_pool.alloc(1)
    assert slot is not None
    fill_slot(p, int(slot[0]), state)
    kv = p.allocator.alloc(len(tokens))
    assert kv is not None
    result = tree.insert(InsertParams(key=RadixKey(tokens), value=kv, mamba_value=slot))
    # What cache_finished_req does with what the tree already had.
    p.allocator.free(kv[: result.prefix_len])
    if result.mamba_exist:
        p.req_to_token.mamba_pool.free(slot)
    return result


def _match(tree: Any, tokens: list[int]) -> tuple[int, Any]:
    MatchPrefixParams = wheel("sglang.srt.mem_cache.base_prefix_cache").MatchPrefixParams
    RadixKey = wheel("sglang.srt.mem_cache.radix_cache").RadixKey

    req = SimpleNamespace(mamba_pool_idx=None)
    result = tree.match_prefix(MatchPrefixParams(key=RadixKey(tokens), req=req, cow_mamba=True))
    return len(result.device_indices), req


def _tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 50_000) for _ in range(n)]


@pytest.mark.usefixtures("glm_args")
def test_hit_restores_the_snapshot_values_into_the_request_slot() -> None:
    p = pools()
    tree = _tree(p)
    turn1 = _tokens(768, seed=1)
    _insert(tree, p, turn1, state=7.0)
    turn2 = [*turn1, *_tokens(300, seed=2)]

    hit, req = _match(tree, turn2)

    assert hit == 768
    assert req.mamba_pool_idx is not None
    for got in slot_values(p, int(req.mamba_pool_idx)):
        assert torch.all(got == 7.0)


@pytest.mark.usefixtures("glm_args")
def test_hits_are_whole_units_and_fall_back_to_the_deepest_state() -> None:
    p = pools()
    tree = _tree(p)
    base = _tokens(1024, seed=3)
    _insert(tree, p, base[:512], state=1.0)
    _insert(tree, p, base, state=2.0)

    # Diverging at 900 (not a unit boundary): the deepest state at or below it is at 512.
    query = [*base[:900], *_tokens(200, seed=4)]
    hit, req = _match(tree, query)

    assert hit == 512
    assert all(torch.all(v == 1.0) for v in slot_values(p, int(req.mamba_pool_idx)))
    # The split happened on a unit boundary (768), not where the keys diverged.
    lengths = [len(n.key) for n in tree._collect_all_nodes() if n is not tree.root_node]
    assert all(n % 256 == 0 for n in lengths)


@pytest.mark.usefixtures("glm_args")
def test_caching_a_prefix_off_the_unit_is_refused() -> None:
    p = pools()
    tree = _tree(p)
    with pytest.raises(SnapshotAlignmentError, match="320-token prefix, not a multiple of 256"):
        _insert(tree, p, _tokens(320, seed=5), state=1.0)


@pytest.mark.usefixtures("glm_args")
def test_eviction_and_the_trees_own_sanity_check_hold_under_churn() -> None:
    EvictParams = wheel("sglang.srt.mem_cache.base_prefix_cache").EvictParams

    p = pools(slots=10, kv_tokens=40 * 64)
    tree = _tree(p)
    rng = random.Random(11)
    # Multi-turn sessions competing for too few slots and pages.
    sessions: list[list[int]] = [[] for _ in range(5)]
    stored: dict[tuple[int, int], float] = {}
    hits = 0
    for step in range(80):
        s = rng.randrange(len(sessions))
        if len(sessions[s]) > 1536:
            sessions[s] = []
        tokens = [*sessions[s], *_tokens(256 * rng.randint(1, 2), seed=1000 + step)]
        if p.allocator.available_size() < len(tokens):
            tree.evict(EvictParams(num_tokens=len(tokens) - p.allocator.available_size()))
        if p.req_to_token.mamba_pool.available_size() < 2:
            tree.evict(EvictParams(num_tokens=0, mamba_num=2))
        hit, req = _match(tree, tokens)
        if req.mamba_pool_idx is not None:
            hits += 1
            for got in slot_values(p, int(req.mamba_pool_idx)):
                assert torch.all(got == stored[(s, hit)])
            p.req_to_token.mamba_pool.free(req.mamba_pool_idx.unsqueeze(0))
        if p.allocator.available_size() >= len(tokens):
            _insert(tree, p, tokens, state=float(step))
            stored[(s, len(tokens))] = float(step)
            sessions[s] = tokens
        tree.sanity_check()
        nodes = [n for n in tree._collect_all_nodes() if n is not tree.root_node]
        assert all(len(n.key) % 256 == 0 for n in nodes)
        # Every KV index is owned exactly once: by the tree or by the free list.
        assert tree.full_evictable_size() + p.allocator.available_size() == p.kv_tokens
    assert hits > 10
    # Full eviction returns every slot and page.
    tree.evict(EvictParams(num_tokens=p.kv_tokens, mamba_num=10))
    tree.sanity_check()
    assert p.allocator.available_size() == p.kv_tokens
    assert p.req_to_token.mamba_pool.available_size() == 10


@pytest.mark.usefixtures("glm_args")
def test_stock_tree_would_split_at_64_where_ours_refuses() -> None:
    MambaRadixCache = wheel("sglang.srt.mem_cache.mamba_radix_cache").MambaRadixCache

    p = pools()
    stock = MambaRadixCache(cache_params(p))
    shared = _tokens(320, seed=7)
    _insert(stock, p, [*shared, *_tokens(192, seed=8)], state=1.0)
    _insert(stock, p, [*shared, *_tokens(192, seed=9)], state=2.0)
    splits = {len(n.key) for n in stock._collect_all_nodes() if n.children and n.parent}
    assert splits == {320}
