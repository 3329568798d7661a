"""Snapshot arithmetic: which conv inputs and which chunk state a 256-aligned snapshot keeps.

The stock scheduler decides the snapshot point and the stock backend turns it into indices;
our code supplies GLM's conv layout and writes the rows. The kernels are replaced by a
reference recurrence with the same contract (`h[c]` = state at the start of 64-token chunk
`c` of the extend; the final state is written into the working slot), so every check here is
about indices and layout; the kernels themselves are checked on a GPU (device_check.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.patches.prefix_cache.alignment import SnapshotAlignmentError
from tests.engine.prefix_cache.builders import (
    Pools,
    cache_params,
    pools,
    wheel,
)

FLA_CHUNK = 64
DIMS = [16, 16, 16]  # q, k, v projection widths of the test pool (2 heads x 8)
HEADS, HEAD_DIM = 2, 8


@dataclass
class Request:
    prefix: int
    extend: int
    inputs: torch.Tensor  # [prefix + extend, q+k+v] raw projections
    states: torch.Tensor  # [prefix + extend + 1, H, K, V]: state after t tokens
    working: int
    track: tuple[int, int]
    branching: int | None = None


def _request(prefix: int, extend: int, working: int, track: tuple[int, int], seed: int) -> Request:
    g = torch.Generator().manual_seed(seed)
    n = prefix + extend
    inputs = torch.randn(n, sum(DIMS), generator=g)
    decay = torch.rand(n, HEADS, HEAD_DIM, 1, generator=g)
    update = torch.randn(n, HEADS, HEAD_DIM, HEAD_DIM, generator=g)
    states = torch.zeros(n + 1, HEADS, HEAD_DIM, HEAD_DIM)
    for t in range(n):
        states[t + 1] = decay[t] * states[t] + update[t]
    return Request(prefix, extend, inputs, states, working, track)


def _schedule(
    batch_self: Any, reqs: list[Request]
) -> tuple[list[bool], list[int], list[int], list[Any]]:
    """The stock per-request snapshot decision (with our alignment checks wrapped around it)."""
    ScheduleBatch = wheel("sglang.srt.managers.schedule_batch").ScheduleBatch

    mask: list[bool] = []
    slots: list[int] = []
    seqlens: list[int] = []
    handles = []
    for r in reqs:
        handle = SimpleNamespace(
            prefix_indices=torch.arange(r.prefix),
            extend_input_len=r.extend,
            mamba_ping_pong_track_buffer=torch.tensor(r.track),
            mamba_next_track_idx=0,
            mamba_branching_seqlen=r.branching,
            mamba_last_track_seqlen=None,
            mamba_pool_idx=torch.tensor(r.working),
        )
        ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend(
            batch_self, handle, mask, slots, seqlens
        )
        handles.append(handle)
    return mask, slots, seqlens, handles


def _run_extend(p: Pools, reqs: list[Request]) -> list[Any]:
    from engine.patches.prefix_cache.kda import glm_conv_states_shape, write_conv_snapshots
    from engine.patches.prefix_cache.tree import GlmMambaRadixCache

    MambaAttnBackendBase = wheel(
        "sglang.srt.layers.attention.hybrid_linear_attn_backend"
    ).MambaAttnBackendBase

    batch_self = SimpleNamespace(
        req_to_token_pool=p.req_to_token, tree_cache=GlmMambaRadixCache(cache_params(p))
    )
    mask, slots, seqlens, handles = _schedule(batch_self, reqs)
    extend_lens = torch.tensor([r.extend for r in reqs])
    starts = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.long), extend_lens]), 0)
    batch = SimpleNamespace(
        mamba_track_mask=torch.tensor(mask),
        mamba_track_indices=torch.tensor(slots),
        mamba_track_seqlens=torch.tensor(seqlens),
        extend_prefix_lens=torch.tensor([r.prefix for r in reqs]),
        extend_seq_lens=extend_lens,
    )
    layer = p.req_to_token.mamba2_layer_cache(0)
    backend = SimpleNamespace(
        conv_states_shape=glm_conv_states_shape(tuple(layer.conv[0].shape)), device="cpu"
    )
    working = torch.tensor([r.working for r in reqs])
    conv_idx = MambaAttnBackendBase._init_track_conv_indices(backend, starts, batch)
    h_src, h_dst, final_src, final_dst = MambaAttnBackendBase._init_track_ssm_indices(
        backend, working, batch
    )

    # The kernels' side: chunk states per request, and the final state in the working slot.
    chunk_states = []
    for r in reqs:
        chunks = (r.extend - 1) // FLA_CHUNK + 1
        chunk_states += [r.states[r.prefix + c * FLA_CHUNK] for c in range(chunks)]
        layer.temporal[r.working] = r.states[r.prefix + r.extend]
    h = torch.stack(chunk_states).unsqueeze(0)

    packed = torch.cat([r.inputs[r.prefix :] for r in reqs])
    write_conv_snapshots(
        packed, DIMS, layer.conv, conv_idx, batch.mamba_track_indices[batch.mamba_track_mask]
    )
    metadata = SimpleNamespace(
        track_ssm_h_src=h_src,
        track_ssm_h_dst=h_dst,
        track_ssm_final_src=final_src,
        track_ssm_final_dst=final_dst,
    )
    MambaAttnBackendBase._track_mamba_state_extend(backend, batch, h, layer.temporal, metadata)
    return handles


def _assert_snapshot(p: Pools, r: Request, slot: int, length: int) -> None:
    layer = p.req_to_token.mamba2_layer_cache(0)
    torch.testing.assert_close(layer.temporal[slot], r.states[length], rtol=0, atol=0)
    window = r.inputs[length - 3 : length]
    for part, conv in zip(torch.split(window, DIMS, dim=-1), layer.conv, strict=True):
        torch.testing.assert_close(conv[slot], part.to(conv.dtype), rtol=0, atol=0)


@pytest.mark.usefixtures("glm_args")
def test_prefix_extend_splits_snapshot_the_right_state_and_conv_inputs() -> None:
    p = pools(slots=16)
    reqs = [
        _request(0, 600, working=1, track=(2, 3), seed=1),  # 512, inside a chunk: from h
        _request(256, 512, working=4, track=(5, 6), seed=2),  # 768 = last token: final state
        _request(512, 640, working=7, track=(8, 9), seed=3),  # 1024, chunk-aligned, not last
        _request(0, 200, working=10, track=(11, 12), seed=4),  # under one unit: no snapshot
        _request(256, 300, working=13, track=(14, 15), seed=5),  # 512 from h
    ]
    handles = _run_extend(p, reqs)

    expected = [512, 768, 1024, None, 512]
    assert [h.mamba_last_track_seqlen for h in handles] == expected
    for r, h, length in zip(reqs, handles, expected, strict=True):
        if length is not None:
            # The first call flips the ping-pong index; the write went to track[0].
            assert h.mamba_next_track_idx == 1
            _assert_snapshot(p, r, r.track[0], length)


@pytest.mark.usefixtures("glm_args")
def test_branching_point_inside_the_extend_is_the_snapshot() -> None:
    p = pools(slots=16)
    r = _request(256, 1000, working=1, track=(2, 3), seed=6)
    r.branching = 768
    (handle,) = _run_extend(p, [r])
    assert handle.mamba_last_track_seqlen == 768
    _assert_snapshot(p, r, 2, 768)


@pytest.mark.usefixtures("glm_args")
def test_an_extend_after_a_64_aligned_prefix_is_refused() -> None:
    p = pools(slots=16)
    with pytest.raises(SnapshotAlignmentError, match="320-token prefix"):
        _run_extend(p, [_request(320, 512, working=1, track=(2, 3), seed=7)])


def test_glm_conv_layout_puts_the_window_on_the_axis_sglang_reads() -> None:
    from engine.patches.prefix_cache.kda import glm_conv_states_shape

    # GLM: [layers, slots, K-1, dim]; the stock index code reads K-1 from the last axis.
    assert glm_conv_states_shape((2, 17, 3, 4096)) == (2, 17, 4096, 3)


@pytest.mark.usefixtures("glm_args")
def test_decode_snapshot_copies_all_four_states_only_where_masked() -> None:
    from engine.patches.prefix_cache.kda import write_decode_snapshots

    p = pools(slots=8)
    layer = p.req_to_token.mamba2_layer_cache(1)
    for tensor in [*layer.conv, layer.temporal]:
        tensor.copy_(torch.randn_like(tensor))
    before = [t.clone() for t in [*layer.conv, layer.temporal]]
    working = torch.tensor([1, 2, 3], dtype=torch.int32)
    track = torch.tensor([4, 5, 6])
    mask = torch.tensor([True, False, True])

    write_decode_snapshots(layer.conv, layer.temporal, working, mask, track, 3)

    for old, new in zip(before, [*layer.conv, layer.temporal], strict=True):
        assert torch.equal(new[4], old[1])
        assert torch.equal(new[6], old[3])
        assert torch.equal(new[5], old[5])  # not masked: untouched
        assert torch.equal(new[:4], old[:4])
