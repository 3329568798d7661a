"""Prompt-head checkpoints end to end: the wheel's scheduler pieces and tree, with the patch.

Small sizes with the engine's rules: 256-token unit and track interval, 1024-token chunks, a
head of 1,300 tokens (aligned: 1,280) and sessions of about 2,000 tokens.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from engine.patches.prefix_cache.heads import HEAD_MARK, is_head
from tests.engine.prefix_cache.builders import pools, wheel
from tests.engine.prefix_cache.flow import Flow, make_flow, nodes_with_state

pytestmark = pytest.mark.usefixtures("glm_args")

CHUNK = 1024
HEAD_TOKENS = 1300
HEAD = 1280  # HEAD_TOKENS aligned down to the 256-token track interval


def _tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 50_000) for _ in range(n)]


SHARED_HEAD = _tokens(HEAD_TOKENS, seed=1)


def _session(seed: int, tail: int = 680) -> list[int]:
    return [*SHARED_HEAD, *_tokens(tail, seed=seed)]


def _flow(slots: int = 40) -> Flow:
    return make_flow(pools(slots=slots, kv_tokens=256 * 64), chunk=CHUNK)


def _heads(flow: Flow) -> list[int]:
    return [end for end, node in nodes_with_state(flow.tree) if is_head(node)]


def test_the_head_state_is_saved_at_the_aligned_head() -> None:
    flow = _flow()
    prompt = _session(seed=2)  # 1,980 tokens

    done = flow.run(prompt, head_tokens=HEAD_TOKENS)

    assert done.cached == 0
    # The chunk that would have run 1024..1980 is cut at the head; both the head and the
    # prompt's own aligned end (1792) get their state.
    assert done.chunk_ends == [1024, HEAD, 1980]
    assert done.snapshots == [1024, HEAD, 1792]
    assert _heads(flow) == [HEAD]
    (node,) = [n for end, n in nodes_with_state(flow.tree) if end == HEAD]
    assert flow.slot_value(int(node.mamba_value[0])) == flow.state_of(prompt[:HEAD])
    flow.tree.sanity_check()


def test_a_new_session_with_the_same_head_restores_it() -> None:
    flow = _flow()
    flow.run(_session(seed=2), head_tokens=HEAD_TOKENS)

    # Same head, a different tail: the state after the head is restored (checked in run).
    second = flow.run(_session(seed=3, tail=900), head_tokens=HEAD_TOKENS)
    assert second.cached == HEAD
    assert second.chunk_ends == [HEAD_TOKENS + 900]  # the rest in one chunk, uncut
    # A request that does not declare the head still restores from it.
    third = flow.run(_session(seed=4))
    assert third.cached == HEAD
    flow.tree.sanity_check()


def test_a_head_inside_the_first_chunk_cuts_the_first_chunk() -> None:
    flow = make_flow(pools(slots=40, kv_tokens=256 * 64), chunk=4096)
    done = flow.run(_session(seed=2), head_tokens=HEAD_TOKENS)
    assert done.chunk_ends == [HEAD, 1980]
    assert done.snapshots == [HEAD, 1792]
    assert _heads(flow) == [HEAD]


def test_without_the_field_the_prefill_is_as_before() -> None:
    flow = _flow()
    prompt = _session(seed=2)

    done = flow.run(prompt)

    assert done.chunk_ends == [1024, 1980]
    assert done.snapshots == [1024, 1792]
    assert _heads(flow) == []
    assert [end for end, _ in nodes_with_state(flow.tree)] == [1024, 1792]
    # Another session with the same head finds only the chunk boundary below it.
    assert flow.run(_session(seed=3)).cached == 1024


@pytest.mark.parametrize(
    ("head_tokens", "why"),
    [
        (200, "under one interval"),
        (1792 + 10, "at the prompt's own aligned end: that checkpoint is the head"),
        (5000, "past the prompt"),
        (0, "zero"),
    ],
)
def test_heads_that_need_no_cut(head_tokens: int, why: str) -> None:
    flow = _flow()
    done = flow.run(_session(seed=2), head_tokens=head_tokens)
    assert done.chunk_ends == [1024, 1980], why
    assert done.snapshots == [1024, 1792], why


def test_a_head_at_the_prompts_own_end_is_marked_there() -> None:
    flow = _flow()
    done = flow.run(_session(seed=2), head_tokens=1792 + 10)
    assert done.snapshots == [1024, 1792]
    assert _heads(flow) == [1792]


def test_a_head_already_restored_is_not_saved_again() -> None:
    flow = _flow()
    flow.run(_session(seed=2), head_tokens=HEAD_TOKENS)
    before = len(nodes_with_state(flow.tree))
    second = flow.run(_session(seed=3), head_tokens=HEAD_TOKENS)
    assert second.cached == HEAD
    assert second.snapshots == [1792]
    # One new state (the second session's end), none at the head.
    assert len(nodes_with_state(flow.tree)) == before + 1


def _evict_states(flow: Flow, count: int) -> None:
    EvictParams = wheel("sglang.srt.mem_cache.base_prefix_cache").EvictParams
    flow.tree.evict(EvictParams(num_tokens=0, mamba_num=count))


def _three_sessions_two_turns(flow: Flow, *, keep_marks: bool) -> dict[str, list[int]]:
    """Sessions a, b, c, each a first turn and a second turn that extends it."""
    turns: dict[str, list[int]] = {}
    for seed, name in enumerate("abc", start=10):
        turns[name] = _session(seed=seed, tail=500)
        flow.run(turns[name], head_tokens=HEAD_TOKENS)
        if not keep_marks:
            for _, node in nodes_with_state(flow.tree):
                if is_head(node):
                    delattr(node, HEAD_MARK)
    for seed, name in enumerate("abc", start=20):
        turns[name] = [*turns[name], *_tokens(520, seed=seed)]
        assert flow.run(turns[name], head_tokens=HEAD_TOKENS).cached == 1792
    return turns


def _state_at(flow: Flow, end: int) -> Any:
    return next((n for e, n in nodes_with_state(flow.tree) if e == end), None)


def test_the_head_outlives_the_sessions_older_checkpoints_under_pressure() -> None:
    flow = _flow()
    _three_sessions_two_turns(flow, keep_marks=True)
    flow.tree.sanity_check()
    # States: the chunk boundary at 1024, the head, each session's first turn (now internal)
    # and second turn (a leaf).
    ordinary_internal = [
        node for _, node in nodes_with_state(flow.tree) if node.children and not is_head(node)
    ]
    assert len(ordinary_internal) == 4

    # Evict until no ordinary internal node keeps a state.
    evicted = 0
    while any(node.mamba_value is not None for node in ordinary_internal):
        _evict_states(flow, 1)
        evicted += 1
        assert _state_at(flow, HEAD) is not None, f"head evicted after {evicted} states"
    flow.tree.sanity_check()
    # A new session still starts from the head.
    assert flow.run(_session(seed=30), head_tokens=HEAD_TOKENS).cached == HEAD


def test_without_the_rule_the_same_pressure_evicts_the_head_first() -> None:
    # The same sessions with the head unmarked, i.e. stock LRU order: a node's ancestors sit
    # just behind it, so the head's state goes while a session's first turn still has one.
    flow = _flow()
    _three_sessions_two_turns(flow, keep_marks=False)
    ordinary_internal = [
        node for end, node in nodes_with_state(flow.tree) if node.children and end != HEAD
    ]
    while _state_at(flow, HEAD) is not None:
        _evict_states(flow, 1)
    assert any(node.mamba_value is not None for node in ordinary_internal)
    flow.tree.sanity_check()
