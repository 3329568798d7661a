"""Selection fingerprint for the DSA indexer's prefill query chunk (a profile setting).

The eager sm_120 scorer is plain torch, so it runs here as the wheel wrote it. Changing the
chunk changes only the batch dimension of its matmuls; the top-k key indices picked for
fixed inputs must not change (and on a CPU the logits are bit-identical too).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.patches.kernels import seams
from engine.patches.kernels.settings import WHEEL_INDEXER_QUERY_CHUNK
from tests.engine.kernels.wheel import WheelCode

INDEXER = "sglang.srt.layers.attention.nsa.glm5_next_indexer_logits"
QUERIES = 80
KEYS = 2304  # more than one 2048-key chunk, with a ragged tail
HEADS = 32
HEAD_DIM = 128
TOPK = 512


def _inputs() -> tuple[Any, ...]:
    q = (torch.randn(QUERIES, HEADS, HEAD_DIM) * 2).to(torch.float8_e4m3fn)
    k = (torch.randn(KEYS, HEAD_DIM) * 2).to(torch.float8_e4m3fn)
    k_scale = 0.5 + torch.rand(KEYS)
    weights = torch.randn(QUERIES, HEADS)
    ke = torch.randint(TOPK + 1, KEYS + 1, (QUERIES,), dtype=torch.int32)
    ks = torch.zeros(QUERIES, dtype=torch.int32)
    return q, (k, k_scale), weights, ks, ke


def _logits(wheel: WheelCode, chunk: int | None) -> torch.Tensor:
    """All logit rows as the prefill caller sees them (through our seam when chunk is set)."""
    module = wheel.module(INDEXER)
    iterate = module.iter_glm5_next_eager_fp8_mqa_logits
    if chunk is not None:
        iterate = seams.make_indexer_iter(iterate, chunk)
    q, kv, weights, ks, ke = _inputs()
    rows = torch.empty(QUERIES, KEYS)
    for start, end, chunk_logits in iterate(q, kv, weights, ks, ke):
        rows[start:end] = chunk_logits
    return rows


@pytest.mark.parametrize("chunk", [256])
def test_same_top_k_at_a_larger_query_chunk(wheel: WheelCode, chunk: int) -> None:
    assert wheel.module(INDEXER)._DEFAULT_QUERY_CHUNK == WHEEL_INDEXER_QUERY_CHUNK
    torch.manual_seed(1234)
    base = _logits(wheel, None)
    torch.manual_seed(1234)
    changed = _logits(wheel, chunk)
    assert torch.equal(base, changed)
    base_idx = base.topk(TOPK, dim=-1).indices
    changed_idx = changed.topk(TOPK, dim=-1).indices
    assert torch.equal(base_idx, changed_idx)


def test_the_seam_only_fills_a_missing_chunk() -> None:
    seen: list[Any] = []

    def original(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("query_chunk_size"))
        return iter(())

    wrapped = seams.make_indexer_iter(original, 128)
    list(wrapped(1, 2))
    list(wrapped(1, 2, query_chunk_size=8))
    assert seen == [128, 8]
