"""mHC post in one launch, with GLM's bf16 rounding at every step it rounds.

GLM computes `round(round(post * x) + round(comb^T @ residual))` with `post` and `comb`
first cast to bf16 (see `reference.hc_post_reference`). A kernel that accumulates in fp32
and rounds once gives different bits, so this kernel keeps all four rounding points.
"""

from __future__ import annotations

import torch
import triton  # type: ignore[import-untyped]
import triton.language as tl  # type: ignore[import-untyped]

from engine.patches.kernels.rounding import rne_bf16

# One program covers this many hidden elements of one token (all hc_mult streams).
DEFAULT_BLOCK_H = 1024


@triton.jit  # type: ignore[untyped-decorator]
def _hc_post_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [T, H] bf16
    residual_ptr,  # [T, N*H] bf16
    post_ptr,  # [T, N] fp32
    comb_ptr,  # [T, N*N] fp32, comb[t, j, i] mixes stream j into output stream i
    out_ptr,  # [T, N*H] bf16
    H,
    N: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = offs < H
    x = tl.load(x_ptr + t * H + offs, mask=mask, other=0.0).to(tl.float32)
    for i in tl.static_range(N):
        post = rne_bf16(tl.load(post_ptr + t * N + i).to(tl.float32))
        branch = rne_bf16(post * x)
        # bf16 x bf16 products are exact in fp32, so only the summation order matters;
        # streams are summed in index order like the reference matmul.
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for j in tl.static_range(N):
            comb = rne_bf16(tl.load(comb_ptr + t * N * N + j * N + i).to(tl.float32))
            r = tl.load(residual_ptr + t * N * H + j * H + offs, mask=mask, other=0.0)
            acc += comb * r.to(tl.float32)
        out = rne_bf16(branch + rne_bf16(acc))
        tl.store(out_ptr + t * N * H + i * H + offs, out.to(tl.bfloat16), mask=mask)


def hc_post_supported(
    hidden_states: torch.Tensor,
    residual: torch.Tensor,
    h_res: torch.Tensor,
    h_post: torch.Tensor,
    hc_mult: int,
) -> bool:
    """Shapes and dtypes this kernel reproduces exactly; anything else stays with the wheel."""
    if hidden_states.ndim != 2 or residual.ndim != 2 or hidden_states.shape[0] == 0:
        return False
    tokens, hidden = hidden_states.shape
    return (
        hidden_states.dtype == torch.bfloat16
        and residual.dtype == torch.bfloat16
        and residual.shape == (tokens, hc_mult * hidden)
        and h_post.numel() == tokens * hc_mult
        and h_res.numel() == tokens * hc_mult * hc_mult
        and h_post.dtype in (torch.float32, torch.bfloat16)
        and h_res.dtype in (torch.float32, torch.bfloat16)
    )


def hc_post(
    hidden_states: torch.Tensor,
    residual: torch.Tensor,
    h_res: torch.Tensor,
    h_post: torch.Tensor,
    hc_mult: int,
    *,
    block_h: int = DEFAULT_BLOCK_H,
) -> torch.Tensor:
    """Fused `_glm5_next_hc_post`: flat `[T, N*H]` bf16 out. Caller checks `hc_post_supported`."""
    tokens, hidden = hidden_states.shape
    x = hidden_states.contiguous()
    res = residual.contiguous()
    post = h_post.reshape(tokens, hc_mult).contiguous()
    comb = h_res.reshape(tokens, hc_mult * hc_mult).contiguous()
    out = torch.empty_like(res)
    block = min(block_h, triton.next_power_of_2(hidden))
    grid = (tokens, triton.cdiv(hidden, block))
    _hc_post_kernel[grid](x, res, post, comb, out, hidden, N=hc_mult, BLOCK_H=block)
    return out
