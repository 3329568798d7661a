"""KDA decode glue in one launch: the q/k/v short convolutions plus the recurrent step.

The wheel's decode runs three `causal_conv1d_update` launches, then the bounded-gate decode
kernel (plus copies when its inputs are not contiguous). Here one program owns one
(sequence, head): it convolves that head's q, k and v channels (SiLU, rounded to the
activation dtype as the conv kernel's store does), shifts the three conv states, and runs
the same recurrence as `glm5_next_safe_decode` over the whole value width, so no other
program reads the conv-state rows it writes. The gated RMSNorm after it stays in the model
layer, outside this seam.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton  # type: ignore[import-untyped]
import triton.language as tl  # type: ignore[import-untyped]

from engine.patches.kernels.rounding import rne_bf16

MAX_HEAD_DIM = 256
MAX_CONV_WIDTH = 4


@triton.jit  # type: ignore[untyped-decorator]
def _conv_channel(  # type: ignore[no-untyped-def]
    x_ptr,
    state_ptr,
    w_ptr,
    b_ptr,
    chan,
    mask,
    stride_state_dim,
    stride_state_tok,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ROUND_STATE_PROD: tl.constexpr,
    ROUND_X_PROD: tl.constexpr,
    ROUND_OUT: tl.constexpr,
):
    """One token's causal conv + SiLU for `chan`; shifts the conv state. fp32 result."""
    if HAS_BIAS:
        acc = tl.load(b_ptr + chan, mask=mask, other=0.0).to(tl.float32)
    else:
        acc = tl.zeros(chan.shape, dtype=tl.float32)
    x = tl.load(x_ptr + chan, mask=mask, other=0.0)
    for j in tl.static_range(W - 1):
        tap = tl.load(state_ptr + chan * stride_state_dim + j * stride_state_tok, mask=mask)
        prod = tap.to(tl.float32) * tl.load(w_ptr + chan * W + j, mask=mask).to(tl.float32)
        if ROUND_STATE_PROD:
            prod = rne_bf16(prod)
        acc += prod
    prod = x.to(tl.float32) * tl.load(w_ptr + chan * W + (W - 1), mask=mask).to(tl.float32)
    if ROUND_X_PROD:
        prod = rne_bf16(prod)
    acc += prod
    # Shift left by one token: slot j takes slot j+1, the last takes x. A head's channels are
    # fewer than the program's threads, so several warps hold the same channel: each barrier
    # makes every copy finish reading a slot before any copy overwrites it (without them the
    # GPU run raced: a warp read taps another had already shifted).
    for j in tl.static_range(W - 2):
        nxt = tl.load(state_ptr + chan * stride_state_dim + (j + 1) * stride_state_tok, mask=mask)
        tl.debug_barrier()
        tl.store(state_ptr + chan * stride_state_dim + j * stride_state_tok, nxt, mask=mask)
    tl.debug_barrier()
    tl.store(
        state_ptr + chan * stride_state_dim + (W - 2) * stride_state_tok,
        x.to(state_ptr.dtype.element_ty),
        mask=mask,
    )
    acc = acc / (1 + tl.exp(-acc))
    if ROUND_OUT:
        acc = rne_bf16(acc)
    return acc


@triton.jit  # type: ignore[untyped-decorator]
def _kda_decode_kernel(  # type: ignore[no-untyped-def]
    qkv_ptr,  # [B, q_dim + k_dim + v_dim] activations, row stride stride_qkv
    q_state_ptr,
    k_state_ptr,
    v_state_ptr,  # conv states [slots, dim, W-1] (strides passed)
    q_w_ptr,
    k_w_ptr,
    v_w_ptr,  # conv weights [dim, W]
    q_b_ptr,
    k_b_ptr,
    v_b_ptr,
    gate_ptr,  # [B, HV*K] raw gate
    beta_ptr,  # [B, HV] raw beta
    a_log_ptr,  # [HV]
    dt_bias_ptr,  # [HV*K]
    ssm_ptr,  # [slots, HV, K, V]
    idx_ptr,  # [B] state slot per sequence, < 0 for padding
    out_ptr,  # [B, HV, V]
    stride_qkv,
    stride_qs_slot,
    stride_qs_dim,
    stride_qs_tok,
    stride_ks_slot,
    stride_ks_dim,
    stride_ks_tok,
    stride_vs_slot,
    stride_vs_dim,
    stride_vs_tok,
    lower_bound,
    scale,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ROUND_STATE_PROD: tl.constexpr,
    ROUND_X_PROD: tl.constexpr,
    ROUND_ACT: tl.constexpr,
    ROUND_BETA: tl.constexpr,
    ROUND_OUT: tl.constexpr,
):
    n = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs_k = tl.arange(0, BK)
    offs_v = tl.arange(0, BV)
    mask_k = offs_k < K
    mask_v = offs_v < V
    out_row = out_ptr + (n * HV + h) * V + offs_v
    slot = tl.load(idx_ptr + n).to(tl.int64)
    if slot < 0:
        zeros = tl.zeros([BV], dtype=tl.float32)
        tl.store(out_row, zeros.to(out_ptr.dtype.element_ty), mask=mask_v)
        return

    row = qkv_ptr + n * stride_qkv
    q = _conv_channel(
        row,
        q_state_ptr + slot * stride_qs_slot,
        q_w_ptr,
        q_b_ptr,
        h * K + offs_k,
        mask_k,
        stride_qs_dim,
        stride_qs_tok,
        W,
        HAS_BIAS,
        ROUND_STATE_PROD,
        ROUND_X_PROD,
        ROUND_ACT,
    )
    k = _conv_channel(
        row + HV * K,
        k_state_ptr + slot * stride_ks_slot,
        k_w_ptr,
        k_b_ptr,
        h * K + offs_k,
        mask_k,
        stride_ks_dim,
        stride_ks_tok,
        W,
        HAS_BIAS,
        ROUND_STATE_PROD,
        ROUND_X_PROD,
        ROUND_ACT,
    )
    v = _conv_channel(
        row + 2 * HV * K,
        v_state_ptr + slot * stride_vs_slot,
        v_w_ptr,
        v_b_ptr,
        h * V + offs_v,
        mask_v,
        stride_vs_dim,
        stride_vs_tok,
        W,
        HAS_BIAS,
        ROUND_STATE_PROD,
        ROUND_X_PROD,
        ROUND_ACT,
    )
    q = tl.where(mask_k, q, 0.0)
    k = tl.where(mask_k, k, 0.0)
    v = tl.where(mask_v, v, 0.0)

    # The recurrence, as `_glm5_next_safe_decode_kernel` writes it for one token.
    gate = tl.load(gate_ptr + (n * HV + h) * K + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    bias = tl.load(dt_bias_ptr + h * K + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    gate_scale = tl.exp(tl.load(a_log_ptr + h).to(tl.float32))
    gate = lower_bound * tl.sigmoid(gate_scale * (gate + bias))
    beta = tl.sigmoid(tl.load(beta_ptr + n * HV + h).to(tl.float32))
    if ROUND_BETA:
        beta = rne_bf16(beta)
    q = q / tl.sqrt(tl.sum(q * q) + 1e-6)
    k = k / tl.sqrt(tl.sum(k * k) + 1e-6)
    q = q * scale

    state_ptrs = ssm_ptr + ((slot * HV + h) * K + offs_k[:, None]) * V + offs_v[None, :]
    mask_state = mask_k[:, None] & mask_v[None, :]
    state = tl.load(state_ptrs, mask=mask_state, other=0.0).to(tl.float32)
    state = state * tl.exp(gate[:, None])
    v = v - tl.sum(state * k[:, None], axis=0)
    v = v * beta
    state = state + k[:, None] * v[None, :]
    result = tl.sum(state * q[:, None], axis=0)
    if ROUND_OUT:
        result = rne_bf16(result)
    tl.store(out_row, result.to(out_ptr.dtype.element_ty), mask=mask_v)
    tl.store(state_ptrs, state.to(ssm_ptr.dtype.element_ty), mask=mask_state)


@dataclass(frozen=True)
class KdaDecodeInputs:
    """Everything one decode step of one KDA layer reads and writes (states in place)."""

    mixed_qkv: torch.Tensor  # [B, 3 * HV * K] (q, k, v widths equal)
    conv_states: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # each [slots, dim, W-1]
    conv_weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # each [dim, W]
    conv_biases: tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]
    raw_gate: torch.Tensor  # [B, HV*K] (any shape with that many elements per row)
    raw_beta: torch.Tensor  # [B, HV]
    a_log: torch.Tensor  # HV elements
    dt_bias: torch.Tensor  # HV*K elements
    ssm_states: torch.Tensor  # [slots, HV, K, V]
    cache_indices: torch.Tensor  # [B]
    lower_bound: float
    num_heads: int
    head_k_dim: int
    head_v_dim: int


def kda_decode_supported(inp: KdaDecodeInputs) -> bool:
    """One token per sequence, equal q/k/v head counts, small heads, conv width 2..4."""
    batch = inp.mixed_qkv.shape[0]
    heads, k_dim, v_dim = inp.num_heads, inp.head_k_dim, inp.head_v_dim
    widths = {w.shape[-1] for w in inp.conv_weights}
    biases = {b is None for b in inp.conv_biases}
    return (
        batch > 0
        and inp.mixed_qkv.ndim == 2
        and inp.mixed_qkv.stride(1) == 1
        and inp.mixed_qkv.shape[1] == heads * (2 * k_dim + v_dim)
        and inp.cache_indices.numel() == batch
        and inp.raw_gate.numel() == batch * heads * k_dim
        and inp.raw_beta.numel() == batch * heads
        and len(widths) == 1
        and 2 <= next(iter(widths)) <= MAX_CONV_WIDTH
        and len(biases) == 1
        and k_dim <= MAX_HEAD_DIM
        and v_dim <= MAX_HEAD_DIM
        and inp.ssm_states.shape[1:] == (heads, k_dim, v_dim)
        and all(w.is_contiguous() for w in inp.conv_weights)
        and inp.lower_bound < 0
    )


def kda_decode(inp: KdaDecodeInputs, *, num_warps: int = 4) -> torch.Tensor:
    """Fused decode step: returns `[1, B, HV, V]` in the activation dtype; states updated.

    4 warps: on an H200 (`python -m bench kernels --kda-sweep`, 64 heads of 128) they beat
    8 at every batch from 1 to 128, and beat the wheel's chain at all of them, where 8 warps
    lost to it from batch 64 on (fewer registers per program, more programs per SM).
    """
    qkv = inp.mixed_qkv
    batch = qkv.shape[0]
    heads, k_dim, v_dim = inp.num_heads, inp.head_k_dim, inp.head_v_dim
    width = inp.conv_weights[0].shape[-1]
    out = torch.empty((batch, heads, v_dim), dtype=qkv.dtype, device=qkv.device)
    qs, ks, vs = inp.conv_states
    qw, kw, vw = inp.conv_weights
    qb, kb, vb = inp.conv_biases
    has_bias = qb is not None
    state_bf16 = qs.dtype == torch.bfloat16
    w_bf16 = qw.dtype == torch.bfloat16
    act_bf16 = qkv.dtype == torch.bfloat16
    _kda_decode_kernel[(batch, heads)](
        qkv,
        qs,
        ks,
        vs,
        qw,
        kw,
        vw,
        qb if qb is not None else qw,
        kb if kb is not None else kw,
        vb if vb is not None else vw,
        inp.raw_gate.contiguous(),
        inp.raw_beta.contiguous(),
        inp.a_log.contiguous(),
        inp.dt_bias.contiguous(),
        inp.ssm_states,
        inp.cache_indices,
        out,
        qkv.stride(0),
        *qs.stride(),
        *ks.stride(),
        *vs.stride(),
        float(inp.lower_bound),
        float(k_dim**-0.5),
        HV=heads,
        K=k_dim,
        V=v_dim,
        BK=triton.next_power_of_2(k_dim),
        BV=triton.next_power_of_2(v_dim),
        W=width,
        HAS_BIAS=has_bias,
        ROUND_STATE_PROD=state_bf16 and w_bf16,
        ROUND_X_PROD=act_bf16 and w_bf16,
        ROUND_ACT=act_bf16,
        ROUND_BETA=inp.raw_beta.dtype == torch.bfloat16,
        ROUND_OUT=act_bf16,
        num_warps=num_warps,
    )
    return out.unsqueeze(0)
