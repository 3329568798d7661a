"""Biased sigmoid gate top-k: the wheel's expert sets and weights, ties resolved to lower ids."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.patches.kernels.gate_topk import biased_topk, biased_topk_supported
from engine.patches.kernels.reference import biased_topk_reference
from tests.engine.kernels.helpers import TOKENS
from tests.engine.kernels.wheel import WheelCode

EXPERTS = 288
TOPK = 8
SCALE = 2.5


def _wheel_impl(wheel: WheelCode) -> Any:
    # The torch chain the wheel runs for 288 experts, without its torch.compile wrapper.
    return wheel.function("sglang.srt.layers.moe.topk", "biased_grouped_topk_impl")


def _by_id(weights: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    order = ids.long().argsort(dim=-1)
    return ids.long().gather(1, order), weights.gather(1, order)


@pytest.mark.parametrize("apply_scale", [False, True])
@pytest.mark.parametrize("tokens", TOKENS)
def test_same_experts_and_weights_as_the_wheel(
    wheel: WheelCode, tokens: int, apply_scale: bool
) -> None:
    logits = torch.randn(tokens, EXPERTS)
    bias = 0.05 * torch.randn(EXPERTS)
    weights, ids = biased_topk(logits, bias, TOPK, True, SCALE, apply_scale)
    want_w, want_ids = _wheel_impl(wheel)(
        torch.empty(tokens, 16),
        logits,
        bias,
        TOPK,
        True,
        1,
        1,
        routed_scaling_factor=SCALE,
        apply_routed_scaling_factor_on_output=apply_scale,
    )
    got_ids, got_w = _by_id(weights, ids)
    exp_ids, exp_w = _by_id(want_w, want_ids)
    assert ids.dtype == torch.int32
    assert weights.dtype == torch.float32
    assert torch.equal(got_ids, exp_ids)
    torch.testing.assert_close(got_w, exp_w, rtol=1e-6, atol=0.0)
    ref_w, ref_ids = biased_topk_reference(logits, bias, TOPK, True, SCALE, apply_scale)
    assert torch.equal(ids, ref_ids)  # same selection order too (descending biased score)
    torch.testing.assert_close(weights, ref_w, rtol=1e-6, atol=0.0)


def test_without_renormalisation_weights_are_the_scores(wheel: WheelCode) -> None:
    logits = torch.randn(4, EXPERTS)
    bias = 0.05 * torch.randn(EXPERTS)
    weights, ids = biased_topk(logits, bias, TOPK, False)
    torch.testing.assert_close(weights, logits.sigmoid().gather(1, ids.long()), rtol=1e-6, atol=0)


def test_bias_chooses_but_does_not_weigh() -> None:
    logits = torch.zeros(1, EXPERTS)
    bias = torch.zeros(EXPERTS)
    bias[[5, 77, 287]] = 1.0
    weights, ids = biased_topk(logits, bias, 3, True, SCALE, True)
    assert sorted(ids[0].tolist()) == [5, 77, 287]
    torch.testing.assert_close(weights, torch.full((1, 3), SCALE / 3))


def test_ties_go_to_the_lower_expert_id(wheel: WheelCode) -> None:
    # Ten experts tie for the last three of eight places.
    logits = torch.full((2, EXPERTS), -4.0)
    logits[:, [3, 40, 100, 200, 250]] = 3.0
    tied = [7, 9, 50, 60, 120, 130, 140, 150, 160, 280]
    logits[:, tied] = 1.0
    bias = torch.zeros(EXPERTS)
    weights, ids = biased_topk(logits, bias, TOPK, True, SCALE, False)
    want = sorted([3, 40, 100, 200, 250, 7, 9, 50])
    assert sorted(ids[0].tolist()) == want
    assert sorted(ids[1].tolist()) == want
    # The wheel may break the tie differently; its choice must come from the same tie and
    # carry the same weights, so the routed result only differs in which equal expert runs.
    w_w, w_ids = _wheel_impl(wheel)(torch.empty(2, 1), logits, bias, TOPK, True, 1, 1)
    scores = logits.sigmoid()
    for row in range(2):
        assert sorted(scores[row, w_ids[row].long()].tolist()) == sorted(
            scores[row, ids[row].long()].tolist()
        )
        assert set(w_ids[row].tolist()) - set(want) <= set(tied)
    torch.testing.assert_close(weights.sort(-1).values, w_w.sort(-1).values, rtol=1e-6, atol=0)


def test_only_the_cases_it_reproduces() -> None:
    logits = torch.randn(2, EXPERTS)
    bias = torch.zeros(EXPERTS)
    assert biased_topk_supported(logits, bias, TOPK, 1, 1, 0)
    assert not biased_topk_supported(logits, bias, TOPK, 4, 2, 0)  # groups would be masked
    assert not biased_topk_supported(logits, bias, TOPK, 1, 1, 1)  # fused shared expert slot
    assert not biased_topk_supported(logits, None, TOPK, 1, 1, 0)
    assert not biased_topk_supported(torch.randn(0, EXPERTS), bias, TOPK, 1, 1, 0)
