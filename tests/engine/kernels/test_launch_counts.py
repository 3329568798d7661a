"""Launches per op, counted on the CPU: the wheel's torch chains vs one or two kernels."""

from __future__ import annotations

import torch

from engine.patches.kernels import gate_topk, hc_post, hc_pre, kda_decode
from engine.patches.kernels.counting import count_launches
from tests.engine.kernels.test_kda_decode import _case, _inputs
from tests.engine.kernels.wheel import WheelCode

HIDDEN = 4096


def _total(counts: dict[str, int], prefix: str = "") -> int:
    return sum(v for k, v in counts.items() if k.startswith(prefix))


def test_mhc_launches(wheel: WheelCode) -> None:
    x = torch.randn(1, 4 * HIDDEN).bfloat16()
    fn = torch.randn(24, 4 * HIDDEN) / 128
    scale, base = torch.rand(3), torch.randn(24)
    weight = torch.ones(HIDDEN).bfloat16()
    h = torch.randn(1, HIDDEN).bfloat16()
    h_res, h_post = torch.rand(1, 16), torch.rand(1, 4)
    mhc = wheel.module("sglang.kernels.ops.layernorm.mhc")
    norm = wheel.module("sglang.srt.models.glm5_next_norm").Glm5NextRMSNorm(HIDDEN)
    norm.weight.data = weight
    wheel_post = wheel.function("sglang.srt.models.glm5_next", "_glm5_next_hc_post")

    wheel_pre = count_launches(lambda: mhc.hc_pre(x, fn, scale, base, 4, 1e-6, 1e-6, 20))
    with torch.no_grad():
        wheel_norm = count_launches(lambda: norm(h))
    wheel_hc_post = count_launches(
        lambda: wheel_post(hidden_states=h, residual=x, h_res=h_res, h_post=h_post, hc_mult=4)
    )
    fused_pre = count_launches(
        lambda: hc_pre.hc_pre(x, fn, scale, base, 4, 1e-6, 1e-6, 20, 2.0, weight, 1e-6)
    )
    fused_post = count_launches(lambda: hc_post.hc_post(h, x, h_res, h_post, 4))

    # ENGINE.md B: ~140 + 8 per hc_pre and its norm, 5 per hc_post -> 306 per layer.
    assert _total(wheel_pre) == 140
    assert _total(wheel_norm) == 8
    assert _total(wheel_hc_post) == 5
    assert 2 * (_total(wheel_pre) + _total(wheel_norm) + _total(wheel_hc_post)) == 306
    assert fused_pre == {"triton._hc_pre_gemv_kernel": 1, "triton._hc_pre_finish_kernel": 1}
    assert fused_post == {"triton._hc_post_kernel": 1}


def test_gate_and_kda_launches(wheel: WheelCode) -> None:
    logits, bias = torch.randn(1, 288), torch.randn(288)
    impl = wheel.function("sglang.srt.layers.moe.topk", "biased_grouped_topk_impl")
    eager = count_launches(lambda: impl(logits, logits, bias, 8, True, 1, 1))
    fused = count_launches(lambda: gate_topk.biased_topk(logits, bias, 8, True))
    assert _total(eager, "aten.") >= 10
    assert fused == {"triton._biased_topk_kernel": 1}
    inputs = _inputs(_case(1, 2, 32))
    assert count_launches(lambda: kda_decode.kda_decode(inputs)) == {"triton._kda_decode_kernel": 1}
