"""hc_pre: mix weights within 1e-5 relative, outputs within 1 bf16 ulp, norm fused exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from engine.patches.kernels import hc_pre as hc_pre_module
from engine.patches.kernels.hc_pre import HcPreConfig, hc_pre
from engine.patches.kernels.reference import hc_pre_mixes_reference, hc_pre_reference
from tests.engine.kernels.helpers import (
    HC_MULT,
    HIDDEN,
    TOKENS,
    bf16_ulp,
    bf16_ulps,
    max_rel,
    mutant,
)
from tests.engine.kernels.wheel import WheelCode

MHC = "sglang.kernels.ops.layernorm.mhc"
NORM = "sglang.srt.models.glm5_next_norm"
RMS_EPS = 1e-6
HC_EPS = 1e-6
ITERS = 20
NORM_EPS = 1e-5
# Few, wide programs for the interpreter; the GPU default is covered by test_default_geometry.
CPU_CONFIG = HcPreConfig(block_k=4096, sub_k=1024, block_h=4096)


def _inputs(tokens: int, hidden: int) -> dict[str, Any]:
    width = HC_MULT * hidden
    mix = HC_MULT * (HC_MULT + 2)
    return {
        "x": torch.randn(tokens, width).bfloat16(),
        "hc_fn": torch.randn(mix, width) * (1.0 / width**0.5),
        "hc_scale": 0.5 + torch.rand(3),
        "hc_base": 0.1 * torch.randn(mix),
        "hc_mult": HC_MULT,
        "rms_eps": RMS_EPS,
        "hc_eps": HC_EPS,
        "sinkhorn_iters": ITERS,
        "post_mult_value": 2.0,
    }


def _exact_mixes(args: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The wheel's formula evaluated in float64: the yardstick for "within 1e-5"."""
    a64 = dict(args)
    for key in ("x", "hc_fn", "hc_scale", "hc_base"):
        a64[key] = args[key].double()
    _, post, comb = hc_pre_mixes_reference(**a64)
    return post, comb.reshape(post.shape[0], -1)


def _check_layer_input(args: dict[str, Any], got: torch.Tensor, want: torch.Tensor) -> None:
    """Within 1 bf16 ulp, plus what a 1e-5 mix-weight difference can move a cancelling sum.

    The stream sum `sum_i pre_i * x_i` can cancel; then a pre weight that differs in its
    6th digit (both fp32 evaluations differ from the exact one that much) moves the result
    by more than one ulp of the small result. Such elements must be rare.
    """
    tokens, width = args["x"].shape
    streams = args["x"].float().reshape(tokens, HC_MULT, width // HC_MULT)
    ulp = bf16_ulp(want)
    diff = (got.float() - want.float()).abs()
    assert bool((diff <= ulp + 2e-5 * streams.abs().sum(1)).all())
    beyond_one_ulp = (diff > ulp).float().mean().item()
    assert beyond_one_ulp <= 1e-3


def _wheel_pre(wheel: WheelCode, args: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    out: tuple[torch.Tensor, ...] = wheel.module(MHC).hc_pre(**args)
    return out


def _check_mixes(
    args: dict[str, Any], h_res: torch.Tensor, h_post: torch.Tensor, wheel_out: tuple[Any, ...]
) -> None:
    exact_post, exact_comb = _exact_mixes(args)
    assert max_rel(h_post, exact_post) <= 1e-5
    assert max_rel(h_res, exact_comb) <= 1e-5
    # The wheel's own fp32 evaluation carries its own summation error (~1e-5 at 16k wide).
    assert max_rel(h_res, wheel_out[1]) <= 2e-5
    assert max_rel(h_post, wheel_out[2]) <= 2e-5


@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
def test_matches_the_wheel(wheel: WheelCode, tokens: int, hidden: int) -> None:
    args = _inputs(tokens, hidden)
    layer_input, h_res, h_post, fused = hc_pre(**args, config=CPU_CONFIG)
    want = _wheel_pre(wheel, args)
    assert not fused
    assert layer_input.dtype == torch.bfloat16
    assert h_res.shape == (tokens, HC_MULT * HC_MULT)
    assert h_post.shape == (tokens, HC_MULT)
    _check_mixes(args, h_res, h_post, want)
    _check_layer_input(args, layer_input, want[0])


@pytest.mark.parametrize("norm_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("tokens", "hidden"), [(1, 4096), (2, 1000), (8, 512), (4, 64)])
def test_fused_norm(wheel: WheelCode, tokens: int, hidden: int, norm_dtype: torch.dtype) -> None:
    args = _inputs(tokens, hidden)
    weight = (0.5 + torch.rand(hidden)).to(norm_dtype)
    out, h_res, h_post, fused = hc_pre(
        **args, out_norm_weight=weight, out_norm_eps=NORM_EPS, config=CPU_CONFIG
    )
    plain, _, _, _ = hc_pre(**args, config=CPU_CONFIG)
    assert fused
    assert out.dtype == torch.promote_types(norm_dtype, torch.bfloat16)
    norm = wheel.module(NORM).Glm5NextRMSNorm(hidden, eps=NORM_EPS)
    norm.weight.data = weight
    with torch.no_grad():
        want_from_plain = norm(plain)
        want_end_to_end = norm(_wheel_pre(wheel, args)[0])
    # The norm itself adds no error beyond its own reduction order...
    if norm_dtype == torch.bfloat16:
        assert bf16_ulps(out, want_from_plain) <= 1
    else:
        assert max_rel(out, want_from_plain) <= 1e-5
    # ...and the end-to-end result follows the wheel's norm of the wheel's layer input.
    assert max_rel(out.float(), want_end_to_end.float()) <= 2**-6
    _check_mixes(args, h_res, h_post, _wheel_pre(wheel, args))


@pytest.mark.parametrize("tokens", [1, 8])
def test_reference_is_the_wheels_function(wheel: WheelCode, tokens: int) -> None:
    args = _inputs(tokens, 512)
    mine = hc_pre_reference(**args)
    want = _wheel_pre(wheel, args)
    for got, expected in zip(mine[:3], want[:3], strict=True):
        assert torch.equal(got, expected)


def test_default_geometry(wheel: WheelCode) -> None:
    args = _inputs(2, 1000)
    layer_input, h_res, h_post, _ = hc_pre(**args)
    want = _wheel_pre(wheel, args)
    _check_mixes(args, h_res, h_post, want)
    _check_layer_input(args, layer_input, want[0])


def test_mutant_transposed_comb_fails(tmp_path: Path, wheel: WheelCode) -> None:
    bad = mutant(
        Path(hc_pre_module.__file__),
        tmp_path,
        "tl.store(comb_ptr + t * N * N + ci * N + cj, comb, mask=cmask)",
        "tl.store(comb_ptr + t * N * N + cj * N + ci, comb, mask=cmask)",
    )
    args = _inputs(2, 512)
    _, h_res, h_post, _ = bad.hc_pre(**args, config=CPU_CONFIG)
    with pytest.raises(AssertionError):
        _check_mixes(args, h_res, h_post, _wheel_pre(wheel, args))


def test_mutant_unrounded_layer_input_fails(tmp_path: Path, wheel: WheelCode) -> None:
    # Skipping the bf16 round of the layer input before the norm (one rounding instead of two).
    bad = mutant(
        Path(hc_pre_module.__file__),
        tmp_path,
        "        layer_input = rne_bf16(acc)\n",
        "        layer_input = acc\n",
    )
    args = _inputs(4, 512)
    weight = (0.5 + torch.rand(512)).bfloat16()
    out, _, _, _ = bad.hc_pre(
        **args, out_norm_weight=weight, out_norm_eps=NORM_EPS, config=CPU_CONFIG
    )
    plain, _, _, _ = hc_pre(**args, config=CPU_CONFIG)
    norm = wheel.module(NORM).Glm5NextRMSNorm(512, eps=NORM_EPS)
    norm.weight.data = weight
    with torch.no_grad():
        assert not torch.equal(out, norm(plain))
