"""hc_post: bit-exact with GLM's multi-step bf16 rounding, and the checks catch mutants."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.patches.kernels import hc_post as hc_post_module
from engine.patches.kernels.hc_post import hc_post
from engine.patches.kernels.reference import hc_post_reference
from tests.engine.kernels.helpers import HC_MULT, HIDDEN, TOKENS, mutant
from tests.engine.kernels.wheel import WheelCode

# Whole rows per program: the interpreter runs programs one by one, so fewer is faster.
# The GPU geometry (DEFAULT_BLOCK_H) is covered by test_default_geometry.
CPU_BLOCK_H = 4096


def _inputs(tokens: int, hidden: int) -> tuple[torch.Tensor, ...]:
    # Seeded per shape: unseeded, the inputs depended on how many random numbers the tests
    # before drew. The reference's bf16 matmul on the CPU sums the streams in an order of its
    # own: with torch's start-up state the [8-64] case once differed by one bf16 ulp in one
    # element of 2,048 (an order-of-summation tie the GPU tests do not see).
    torch.manual_seed(tokens * 100_003 + hidden)
    x = torch.randn(tokens, hidden).bfloat16()
    residual = torch.randn(tokens, HC_MULT * hidden).bfloat16()
    h_res = torch.rand(tokens, HC_MULT * HC_MULT)
    h_post = 2 * torch.rand(tokens, HC_MULT)
    return x, residual, h_res, h_post


@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
def test_bit_exact_against_reference(tokens: int, hidden: int) -> None:
    x, residual, h_res, h_post = _inputs(tokens, hidden)
    out = hc_post(x, residual, h_res, h_post, HC_MULT, block_h=CPU_BLOCK_H)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, hc_post_reference(x, residual, h_res, h_post, HC_MULT))


@pytest.mark.parametrize("tokens", [1, 8])
def test_reference_is_the_wheels_function(wheel: WheelCode, tokens: int) -> None:
    wheel_post = wheel.function("sglang.srt.models.glm5_next", "_glm5_next_hc_post")
    x, residual, h_res, h_post = _inputs(tokens, 512)
    want = wheel_post(
        hidden_states=x, residual=residual, h_res=h_res, h_post=h_post, hc_mult=HC_MULT
    )
    assert torch.equal(hc_post_reference(x, residual, h_res, h_post, HC_MULT), want)


@pytest.mark.parametrize("block_h", [hc_post_module.DEFAULT_BLOCK_H, 128])
def test_default_geometry(block_h: int) -> None:
    x, residual, h_res, h_post = _inputs(2, 1000)
    out = hc_post(x, residual, h_res, h_post, HC_MULT, block_h=block_h)
    assert torch.equal(out, hc_post_reference(x, residual, h_res, h_post, HC_MULT))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # the comb matrix read transposed
        ("comb_ptr + t * N * N + j * N + i", "comb_ptr + t * N * N + i * N + j"),
        # one rounding at the end instead of GLM's rounding after each step
        ("out = rne_bf16(branch + rne_bf16(acc))", "out = rne_bf16(post * x + acc)"),
        # the mix used in fp32 instead of cast to bf16 first
        (
            "post = rne_bf16(tl.load(post_ptr + t * N + i).to(tl.float32))",
            "post = tl.load(post_ptr + t * N + i).to(tl.float32)",
        ),
    ],
)
def test_mutants_fail_the_check(tmp_path: Path, old: str, new: str) -> None:
    bad = mutant(Path(hc_post_module.__file__), tmp_path, old, new)
    x, residual, h_res, h_post = _inputs(2, 512)
    out = bad.hc_post(x, residual, h_res, h_post, HC_MULT, block_h=CPU_BLOCK_H)
    assert not torch.equal(out, hc_post_reference(x, residual, h_res, h_post, HC_MULT))
