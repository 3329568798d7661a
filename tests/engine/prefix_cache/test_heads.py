"""Prompt heads: the field, the cut rule, and the scheduler wrappers' edges (one chunked
request per round, the round closed after a cut, a branching point giving way)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.patches.prefix_cache.heads import (
    HEAD_TOKENS_PARAM,
    declared_head_tokens,
    head_cut,
    head_point,
)
from tests.engine.prefix_cache.builders import KV_PAGE, Pools, cache_params, pools, wheel


@pytest.mark.parametrize(
    ("custom_params", "expected"),
    [
        (None, None),
        ({}, None),
        ({HEAD_TOKENS_PARAM: 30_000}, 30_000),
        # What the engine's Req makes of it: its own entry added to the same dict.
        ({HEAD_TOKENS_PARAM: 30_000, "__req__": object()}, 30_000),
        ({HEAD_TOKENS_PARAM: 0}, None),
        ({HEAD_TOKENS_PARAM: -5}, None),
        ({HEAD_TOKENS_PARAM: True}, None),
        ({HEAD_TOKENS_PARAM: 3e4}, None),
        ({HEAD_TOKENS_PARAM: "30000"}, None),
        ("not a dict", None),
    ],
)
def test_the_declared_head(custom_params: object, expected: int | None) -> None:
    assert declared_head_tokens(custom_params) == expected


def test_the_head_point_is_aligned_down_to_the_track_interval() -> None:
    assert head_point({HEAD_TOKENS_PARAM: 30_000}, 256) == 29_952
    assert head_point({HEAD_TOKENS_PARAM: 30_000}, 512) == 29_696
    assert head_point({HEAD_TOKENS_PARAM: 255}, 256) is None
    assert head_point(None, 256) is None


def test_the_cut_rule() -> None:
    # Strictly between the prefix and the extend's own aligned snapshot point.
    assert head_cut(0, 31_000, 29_952, 256) == 29_952
    assert head_cut(16_384, 32_768, 29_952, 256) == 29_952
    assert head_cut(29_952, 31_000, 29_952, 256) is None  # restored already
    assert head_cut(0, 16_384, 29_952, 256) is None  # a later chunk reaches it
    assert head_cut(0, 30_100, 29_952, 256) is None  # the extend's own snapshot is the head
    assert head_cut(0, 31_000, None, 256) is None


def test_stock_sampling_params_take_custom_params_and_ignore_them() -> None:
    """The engine without the patch: SamplingParams accepts the field and checks nothing."""
    SamplingParams = wheel("sglang.srt.sampling.sampling_params").SamplingParams

    params = SamplingParams(max_new_tokens=8, custom_params={HEAD_TOKENS_PARAM: 30_000})
    params.normalize(None)
    params.verify(vocab_size=1000)
    assert params.custom_params == {HEAD_TOKENS_PARAM: 30_000}


class _Req:
    """The fields PrefillAdder reads and writes, with the real length setter."""

    def __init__(self, prefix: int, total: int, head_tokens: int | None) -> None:
        Req = wheel("sglang.srt.managers.schedule_batch").Req

        self._set = Req.set_extend_input_len
        self.prefix_indices = torch.arange(prefix)
        self.fill_ids = list(range(total))
        self.logprob_start_len = -1
        custom = None if head_tokens is None else {HEAD_TOKENS_PARAM: head_tokens}
        self.sampling_params = SimpleNamespace(
            max_new_tokens=64, ignore_eos=False, custom_params=custom
        )
        self.output_ids: list[int] = []
        self.host_hit_length = 0
        self.last_node: Any = None
        self.extend_input_len = total - prefix

    def set_extend_input_len(self, n: int) -> None:
        self._set(self, n)


def _adder(p: Pools) -> Any:
    from engine.patches.prefix_cache.tree import GlmMambaRadixCache

    PrefillAdder = wheel("sglang.srt.managers.schedule_policy").PrefillAdder
    tree = GlmMambaRadixCache(cache_params(p))
    adder = PrefillAdder(KV_PAGE, tree, p.allocator, None, 1.0, 1 << 20, 8192)
    return adder


def _add(adder: Any, req: _Req, has_chunked_req: bool = False) -> Any:
    req.last_node = adder.tree_cache.root_node
    return adder.add_one_req(req, has_chunked_req=has_chunked_req, truncation_align_size=256)


@pytest.mark.usefixtures("glm_args")
def test_an_uncut_request_becomes_the_chunked_one_and_closes_the_round() -> None:
    AddReqResult = wheel("sglang.srt.managers.schedule_policy").AddReqResult

    adder = _adder(pools(kv_tokens=128 * KV_PAGE))
    req = _Req(prefix=512, total=2000, head_tokens=1300)

    assert _add(adder, req) == AddReqResult.OTHER
    assert adder.new_chunked_req is req
    assert len(req.fill_ids) == 1280
    assert req.extend_input_len == 1280 - 512
    # Charged as a truncated chunk: its input only, no output reservation.
    assert adder.rem_total_token_offset == 1280 - 512
    assert adder.log_hit_tokens == 512
    # Nothing else joins the round: a second long request would replace ours as chunked.
    other = _Req(prefix=0, total=3000, head_tokens=None)
    assert _add(adder, other) == AddReqResult.OTHER
    assert adder.can_run_list == [req]
    assert adder.new_chunked_req is req


@pytest.mark.usefixtures("glm_args")
def test_no_second_chunked_request_in_a_round() -> None:
    # The scheduler still has a chunked request: this one runs uncut (and saves no head).
    adder = _adder(pools(kv_tokens=128 * KV_PAGE))
    req = _Req(prefix=512, total=2000, head_tokens=1300)
    _add(adder, req, has_chunked_req=True)
    assert adder.new_chunked_req is None
    assert len(req.fill_ids) == 2000
    # Nor when another request of this round was already truncated.
    adder = _adder(pools(kv_tokens=128 * KV_PAGE))
    adder.new_chunked_req = object()
    req = _Req(prefix=512, total=2000, head_tokens=1300)
    _add(adder, req)
    assert len(req.fill_ids) == 2000


@pytest.mark.usefixtures("glm_args")
def test_a_later_chunk_is_cut_at_the_head_and_closes_the_round() -> None:
    adder = _adder(pools(kv_tokens=128 * KV_PAGE))
    req = _Req(prefix=1024, total=2000, head_tokens=1300)

    assert adder.add_chunked_req(req) is req  # still chunked: the rest follows
    assert len(req.fill_ids) == 1280
    assert adder.can_run_list == [req]
    assert adder.rem_chunk_tokens == 0
    assert adder.rem_total_token_offset == 256
    assert adder.log_hit_tokens == 0


@pytest.mark.usefixtures("glm_args")
def test_without_the_field_add_one_req_is_the_stock_one() -> None:
    adder = _adder(pools(kv_tokens=128 * KV_PAGE))
    req = _Req(prefix=512, total=2000, head_tokens=None)
    _add(adder, req)
    assert adder.new_chunked_req is None
    assert len(req.fill_ids) == 2000
    assert adder.rem_chunk_tokens == 8192 - (2000 - 512 + 64 - (2000 - 512) % 64)


@pytest.mark.usefixtures("glm_args")
def test_a_branching_point_below_the_head_gives_way_to_it() -> None:
    from engine.patches.prefix_cache.tree import GlmMambaRadixCache

    ScheduleBatch = wheel("sglang.srt.managers.schedule_batch").ScheduleBatch

    p = pools(slots=8)
    owner = SimpleNamespace(
        req_to_token_pool=p.req_to_token, tree_cache=GlmMambaRadixCache(cache_params(p))
    )

    def prepare(head_tokens: int | None) -> int | None:
        custom = None if head_tokens is None else {HEAD_TOKENS_PARAM: head_tokens}
        req = SimpleNamespace(
            prefix_indices=torch.arange(0),
            extend_input_len=1280,  # this chunk ends at the head
            mamba_ping_pong_track_buffer=torch.tensor([2, 3]),
            mamba_next_track_idx=0,
            mamba_branching_seqlen=768,
            mamba_last_track_seqlen=None,
            mamba_pool_idx=torch.tensor(1),
            sampling_params=SimpleNamespace(custom_params=custom),
        )
        ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend(owner, req, [], [], [])
        snapshot: int | None = req.mamba_last_track_seqlen
        return snapshot

    assert prepare(None) == 768  # stock: the branching point takes the snapshot
    assert prepare(1300) == 1280
