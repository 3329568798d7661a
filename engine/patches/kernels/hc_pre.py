"""mHC pre in two launches, optionally with the following RMSNorm fused into the second.

Launch 1 splits the 24-wide GEMV over the `hc_mult * hidden` streams (and the sum of squares
for the RMS scale) across programs and writes fp32 partial sums. Launch 2, one program per
token, adds the partials, applies the RMS scale, sigmoid/softmax, the Sinkhorn iterations on
the `hc_mult x hc_mult` mix, the weighted stream sum (rounded to bf16 like the reference)
and, when asked, GLM's RMSNorm (normalise in fp32, round, scale). No `tl.dot`: the GEMV
stays in true fp32 (a dot would run in TF32 on the GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton  # type: ignore[import-untyped]
import triton.language as tl  # type: ignore[import-untyped]

from engine.patches.kernels.rounding import rne_bf16

# Widest hidden size the second launch holds in registers when it fuses the RMSNorm.
MAX_FUSED_NORM_HIDDEN = 16384


@dataclass(frozen=True)
class HcPreConfig:
    """Launch geometry; every bound explicit."""

    block_k: int = 512  # stream elements per program in the GEMV launch
    sub_k: int = 128  # elements per inner step (register tile is mix_width x sub_k)
    block_h: int = 1024  # hidden elements per step when the norm is not fused


@triton.jit  # type: ignore[untyped-decorator]
def _hc_pre_gemv_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [T, W] bf16, W = N * H
    fn_ptr,  # [MIX, W] fp32
    part_mix_ptr,  # [T, SPLIT, MIXP] fp32
    part_sq_ptr,  # [T, SPLIT] fp32
    W,
    SPLIT,
    MIX: tl.constexpr,
    MIXP: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SUB_K: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    rows = tl.arange(0, MIXP)
    row_mask = rows < MIX
    mix = tl.zeros([MIXP], dtype=tl.float32)
    sq = tl.zeros([SUB_K], dtype=tl.float32)
    for step in tl.static_range(BLOCK_K // SUB_K):
        cols = s * BLOCK_K + step * SUB_K + tl.arange(0, SUB_K)
        col_mask = cols < W
        r = tl.load(x_ptr + t * W + cols, mask=col_mask, other=0.0).to(tl.float32)
        sq += r * r
        w = tl.load(
            fn_ptr + rows[:, None] * W + cols[None, :],
            mask=row_mask[:, None] & col_mask[None, :],
            other=0.0,
        )
        mix += tl.sum(w * r[None, :], axis=1)
    tl.store(part_mix_ptr + (t * SPLIT + s) * MIXP + rows, mix)
    tl.store(part_sq_ptr + t * SPLIT + s, tl.sum(sq, axis=0))


@triton.jit  # type: ignore[untyped-decorator]
def _hc_pre_finish_kernel(  # type: ignore[no-untyped-def]
    x_ptr,  # [T, N*H] bf16
    part_mix_ptr,  # [T, SPLIT, MIXP] fp32
    part_sq_ptr,  # [T, SPLIT] fp32
    scale_ptr,  # [3] fp32
    base_ptr,  # [MIX] fp32
    norm_w_ptr,  # [H] (only read when FUSE_NORM)
    out_ptr,  # [T, H] layer input (or its RMSNorm)
    post_ptr,  # [T, N] fp32
    comb_ptr,  # [T, N*N] fp32
    H,
    SPLIT,
    rms_eps,
    hc_eps,
    post_mult,
    norm_eps,
    N: tl.constexpr,
    NP: tl.constexpr,
    MIXP: tl.constexpr,
    SPLITP: tl.constexpr,
    ITERS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    FUSE_NORM: tl.constexpr,
    OUT_BF16: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    splits = tl.arange(0, SPLITP)
    split_mask = splits < SPLIT
    ni = tl.arange(0, NP)
    n_mask = ni < N
    part = part_mix_ptr + (t * SPLIT + splits[:, None]) * MIXP
    both = split_mask[:, None] & n_mask[None, :]

    total_sq = tl.sum(tl.load(part_sq_ptr + t * SPLIT + splits, mask=split_mask, other=0.0))
    inv_rms = 1.0 / tl.sqrt(total_sq / (N * H) + rms_eps)

    pre_raw = tl.sum(tl.load(part + ni[None, :], mask=both, other=0.0), axis=0) * inv_rms
    post_raw = tl.sum(tl.load(part + N + ni[None, :], mask=both, other=0.0), axis=0) * inv_rms
    s0 = tl.load(scale_ptr)
    s1 = tl.load(scale_ptr + 1)
    s2 = tl.load(scale_ptr + 2)
    pre = tl.sigmoid(pre_raw * s0 + tl.load(base_ptr + ni, mask=n_mask, other=0.0)) + hc_eps
    post = post_mult * tl.sigmoid(post_raw * s1 + tl.load(base_ptr + N + ni, mask=n_mask))
    tl.store(post_ptr + t * N + ni, post, mask=n_mask)

    # comb[i, j] = mixes[2N + i*N + j]; softmax over j, then column/row normalisation.
    ci = tl.arange(0, NP)[:, None]
    cj = tl.arange(0, NP)[None, :]
    cmask = (ci < N) & (cj < N)
    coff = 2 * N + ci * N + cj
    comb_parts = tl.load(
        part_mix_ptr + (t * SPLIT + splits[:, None, None]) * MIXP + coff[None, :, :],
        mask=split_mask[:, None, None] & cmask[None, :, :],
        other=0.0,
    )
    comb = tl.sum(comb_parts, axis=0) * inv_rms * s2
    comb += tl.load(base_ptr + coff, mask=cmask, other=0.0)
    comb = tl.where(cmask, comb, float("-inf"))
    row_max = tl.max(comb, axis=1)
    e = tl.exp(comb - row_max[:, None])
    e = tl.where(cmask, e, 0.0)
    comb = e / tl.sum(e, axis=1)[:, None] + hc_eps
    comb = tl.where(cmask, comb, 0.0)
    comb = comb / (tl.sum(comb, axis=0)[None, :] + hc_eps)
    for _ in tl.static_range(ITERS - 1):
        comb = comb / (tl.sum(comb, axis=1)[:, None] + hc_eps)
        comb = comb / (tl.sum(comb, axis=0)[None, :] + hc_eps)
    tl.store(comb_ptr + t * N * N + ci * N + cj, comb, mask=cmask)

    if FUSE_NORM:
        offs = tl.arange(0, BLOCK_H)
        hmask = offs < H
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for i in tl.static_range(N):
            p = tl.sum(tl.where(ni == i, pre, 0.0), axis=0)
            r = tl.load(x_ptr + t * N * H + i * H + offs, mask=hmask, other=0.0)
            acc += p * r.to(tl.float32)
        layer_input = rne_bf16(acc)
        var = tl.sum(layer_input * layer_input, axis=0) / H
        normalized = rne_bf16(layer_input * (1.0 / tl.sqrt(var + norm_eps)))
        y = tl.load(norm_w_ptr + offs, mask=hmask, other=0.0).to(tl.float32) * normalized
        if OUT_BF16:
            tl.store(out_ptr + t * H + offs, rne_bf16(y).to(tl.bfloat16), mask=hmask)
        else:
            tl.store(out_ptr + t * H + offs, y, mask=hmask)
    else:
        for h0 in range(0, H, BLOCK_H):
            offs = h0 + tl.arange(0, BLOCK_H)
            hmask = offs < H
            acc = tl.zeros([BLOCK_H], dtype=tl.float32)
            for i in tl.static_range(N):
                p = tl.sum(tl.where(ni == i, pre, 0.0), axis=0)
                r = tl.load(x_ptr + t * N * H + i * H + offs, mask=hmask, other=0.0)
                acc += p * r.to(tl.float32)
            tl.store(out_ptr + t * H + offs, rne_bf16(acc).to(tl.bfloat16), mask=hmask)


def hc_pre_supported(
    x: torch.Tensor,
    hc_fn: torch.Tensor,
    hc_mult: int,
    hc_norm_weight: torch.Tensor | None,
    max_tokens: int,
) -> bool:
    """Inputs the kernels reproduce; anything else (and big prefills) stays with the wheel."""
    if x.ndim != 2 or hc_mult <= 0 or x.shape[1] % hc_mult != 0:
        return False
    tokens = x.shape[0]
    mix_width = hc_mult * (hc_mult + 2)
    return (
        0 < tokens <= max_tokens
        and x.dtype == torch.bfloat16
        and hc_norm_weight is None
        and hc_fn.dtype == torch.float32
        and hc_fn.shape == (mix_width, x.shape[1])
    )


def norm_fusable(hidden: int, weight: torch.Tensor | None) -> bool:
    return (
        weight is not None
        and weight.shape == (hidden,)
        and weight.dtype in (torch.bfloat16, torch.float32)
        and hidden <= MAX_FUSED_NORM_HIDDEN
    )


def hc_pre(
    x: torch.Tensor,
    hc_fn: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_mult: int,
    rms_eps: float,
    hc_eps: float,
    sinkhorn_iters: int,
    post_mult_value: float = 2.0,
    out_norm_weight: torch.Tensor | None = None,
    out_norm_eps: float | None = None,
    *,
    config: HcPreConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """Fused `mhc.hc_pre`: `(layer_input, h_res [T,N*N], h_post [T,N], norm_fused)`.

    The norm is fused when `out_norm_weight` is given and `norm_fusable` says so.
    Caller checks `hc_pre_supported`.
    """
    cfg = config or HcPreConfig()
    x = x.contiguous()
    tokens, width = x.shape
    hidden = width // hc_mult
    mix_width = hc_mult * (hc_mult + 2)
    mixp = triton.next_power_of_2(mix_width)
    block_k = min(cfg.block_k, max(cfg.sub_k, triton.next_power_of_2(width)))
    sub_k = min(cfg.sub_k, block_k)
    split = triton.cdiv(width, block_k)
    part_mix = torch.empty((tokens, split, mixp), dtype=torch.float32, device=x.device)
    part_sq = torch.empty((tokens, split), dtype=torch.float32, device=x.device)
    _hc_pre_gemv_kernel[(tokens, split)](
        x,
        hc_fn.contiguous(),
        part_mix,
        part_sq,
        width,
        split,
        MIX=mix_width,
        MIXP=mixp,
        BLOCK_K=block_k,
        SUB_K=sub_k,
    )

    fuse = norm_fusable(hidden, out_norm_weight)
    if fuse:
        assert out_norm_weight is not None
        out_dtype = torch.promote_types(out_norm_weight.dtype, x.dtype)
        norm_w = out_norm_weight.contiguous()
        block_h = triton.next_power_of_2(hidden)
    else:
        out_dtype = x.dtype
        norm_w = x  # never read
        block_h = min(cfg.block_h, triton.next_power_of_2(hidden))
    out = torch.empty((tokens, hidden), dtype=out_dtype, device=x.device)
    post = torch.empty((tokens, hc_mult), dtype=torch.float32, device=x.device)
    comb = torch.empty((tokens, hc_mult * hc_mult), dtype=torch.float32, device=x.device)
    _hc_pre_finish_kernel[(tokens,)](
        x,
        part_mix,
        part_sq,
        hc_scale.contiguous(),
        hc_base.contiguous(),
        norm_w,
        out,
        post,
        comb,
        hidden,
        split,
        float(rms_eps),
        float(hc_eps),
        float(post_mult_value),
        float(1e-6 if out_norm_eps is None else out_norm_eps),
        N=hc_mult,
        NP=triton.next_power_of_2(hc_mult),
        MIXP=mixp,
        SPLITP=triton.next_power_of_2(split),
        ITERS=sinkhorn_iters,
        BLOCK_H=block_h,
        FUSE_NORM=fuse,
        OUT_BF16=out_dtype == torch.bfloat16,
    )
    return out, comb, post, fuse
