"""Bigger sweeps (make test-full): more seeds, the GPU launch geometry at every size,
wider gates, GLM-sized KDA heads, and more indexer query chunks."""

from __future__ import annotations

import pytest
import torch

from engine.patches.kernels.gate_topk import biased_topk
from engine.patches.kernels.hc_post import hc_post
from engine.patches.kernels.hc_pre import hc_pre
from engine.patches.kernels.kda_decode import kda_decode
from engine.patches.kernels.reference import biased_topk_reference, hc_post_reference
from tests.engine.kernels import test_hc_pre as pre_tests
from tests.engine.kernels import test_indexer_chunk as idx_tests
from tests.engine.kernels import test_kda_decode as kda_tests
from tests.engine.kernels.helpers import HC_MULT, HIDDEN, TOKENS
from tests.engine.kernels.wheel import WheelCode

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
def test_hc_ops_default_geometry(wheel: WheelCode, tokens: int, hidden: int, seed: int) -> None:
    torch.manual_seed(seed)
    args = pre_tests._inputs(tokens, hidden)
    layer_input, h_res, h_post, _ = hc_pre(**args)
    want = pre_tests._wheel_pre(wheel, args)
    pre_tests._check_mixes(args, h_res, h_post, want)
    pre_tests._check_layer_input(args, layer_input, want[0])
    x = torch.randn(tokens, hidden).bfloat16()
    assert torch.equal(
        hc_post(x, args["x"], h_res, h_post, HC_MULT),
        hc_post_reference(x, args["x"], h_res, h_post, HC_MULT),
    )


@pytest.mark.parametrize("seed", range(20))
def test_gate_many_tokens(seed: int) -> None:
    torch.manual_seed(seed)
    logits = torch.randn(64, 288) * (1 + seed % 4)
    bias = 0.1 * torch.randn(288)
    weights, ids = biased_topk(logits, bias, 8, True, 2.5, True)
    ref_w, ref_ids = biased_topk_reference(logits, bias, 8, True, 2.5, True)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(weights, ref_w, rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("batch", [1, 8])
def test_kda_glm_sized_heads(wheel: WheelCode, batch: int) -> None:
    case = kda_tests._case(batch, 4, 128)
    ref_case = kda_tests._clone(case)
    out = kda_decode(kda_tests._inputs(case))
    want = kda_tests._reference(wheel, ref_case)
    torch.testing.assert_close(out.float(), want.float(), rtol=2**-7, atol=1e-5)
    torch.testing.assert_close(case["ssm"], ref_case["ssm"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk", [64, 128, 512, 1024])
def test_indexer_more_chunks(wheel: WheelCode, chunk: int) -> None:
    idx_tests.test_same_top_k_at_a_larger_query_chunk(wheel, chunk)
