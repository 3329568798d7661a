"""Plain-torch references for the fused kernels, written from the wheel's formulas.

Each one follows the arithmetic of the sglang-kt 0.7.2 code the kernel replaces, op for op,
including where it rounds to bf16; the tests also check them against the wheel's own
functions where those run on a CPU. They are also what a launch counter sees as "before".
"""

from __future__ import annotations

import torch


def hc_post_reference(
    hidden_states: torch.Tensor,
    residual: torch.Tensor,
    h_res: torch.Tensor,
    h_post: torch.Tensor,
    hc_mult: int,
) -> torch.Tensor:
    """GLM mHC post: mixes cast to the hidden dtype first, then three rounded steps."""
    tokens, hidden = hidden_states.shape
    streams = residual.reshape(tokens, hc_mult, hidden)
    post = h_post.reshape(tokens, hc_mult).to(hidden_states.dtype)
    comb = h_res.reshape(tokens, hc_mult, hc_mult).to(hidden_states.dtype)
    mixed = torch.matmul(comb.transpose(-1, -2), streams)
    out = post.unsqueeze(-1) * hidden_states.unsqueeze(1) + mixed
    return out.reshape(tokens, hc_mult * hidden)


def hc_pre_mixes_reference(
    x: torch.Tensor,
    hc_fn: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    hc_mult: int,
    rms_eps: float,
    hc_eps: float,
    sinkhorn_iters: int,
    post_mult_value: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mHC pre mix weights: `(pre [T,N], post [T,N], comb [T,N,N])`, all fp32."""
    tokens = x.shape[0]
    # fp32 like the model; a float64 input stays float64 (the tests' exact yardstick).
    flat = x.double() if x.dtype == torch.float64 else x.float()
    inv_rms = torch.rsqrt(flat.square().mean(-1, keepdim=True) + rms_eps)
    mixes = torch.nn.functional.linear(flat, hc_fn) * inv_rms
    n = hc_mult
    pre = torch.sigmoid(mixes[:, :n] * hc_scale[0] + hc_base[:n]) + hc_eps
    post = post_mult_value * torch.sigmoid(mixes[:, n : 2 * n] * hc_scale[1] + hc_base[n : 2 * n])
    comb = mixes[:, 2 * n :].reshape(tokens, n, n) * hc_scale[2] + hc_base[2 * n :].reshape(n, n)
    comb = comb.softmax(-1) + hc_eps
    comb = comb / (comb.sum(-2, keepdim=True) + hc_eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + hc_eps)
        comb = comb / (comb.sum(-2, keepdim=True) + hc_eps)
    return pre, post, comb


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """GLM RMSNorm: normalise in fp32, round to the input dtype, then scale."""
    x32 = x.float()
    normalized = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normalized.to(x.dtype)


def hc_pre_reference(
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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """`hc_pre`'s contract: `(layer_input [T,H], h_res [T,N*N], h_post [T,N], norm_fused)`.

    With `out_norm_weight` the following RMSNorm is applied and `norm_fused` is True.
    """
    tokens, width = x.shape
    hidden = width // hc_mult
    pre, post, comb = hc_pre_mixes_reference(
        x, hc_fn, hc_scale, hc_base, hc_mult, rms_eps, hc_eps, sinkhorn_iters, post_mult_value
    )
    streams = x.reshape(tokens, hc_mult, hidden).float()
    layer_input = (pre.unsqueeze(-1) * streams).sum(dim=1).to(x.dtype)
    fused = out_norm_weight is not None
    if out_norm_weight is not None:
        eps = 1e-6 if out_norm_eps is None else out_norm_eps
        layer_input = rms_norm_reference(layer_input, out_norm_weight, eps)
    return layer_input, comb.reshape(tokens, hc_mult * hc_mult), post, fused


def biased_topk_reference(
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor,
    topk: int,
    renormalize: bool,
    routed_scaling_factor: float | None,
    apply_routed_scaling_factor_on_output: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sigmoid routing with a selection-only bias (one expert group), ids int32.

    Ties on the biased score go to the lower expert id (torch.topk leaves them unordered).
    """
    scores = gating_output.float().sigmoid()
    choice = scores + correction_bias.float().unsqueeze(0)
    # A stable descending sort makes the tie rule explicit: equal keys keep id order.
    order = torch.sort(choice, dim=-1, descending=True, stable=True).indices
    ids = order[:, :topk]
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
        if apply_routed_scaling_factor_on_output and routed_scaling_factor is not None:
            weights = weights * routed_scaling_factor
    return weights.float(), ids.to(torch.int32)


def conv_update_reference(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    state_indices: torch.Tensor,
) -> torch.Tensor:
    """One-token causal conv + SiLU, as sglang's Triton `causal_conv1d_update` computes it.

    `x` is `[B, D]`, `conv_state` is `[slots, D, W-1]` (any strides; updated in place),
    `weight` is `[D, W]`. Taps are accumulated oldest first onto the bias; a product of two
    bf16 tensors is rounded to bf16 before it is added (Triton's bf16 * bf16 is bf16).
    Rows whose slot is negative are skipped and their output is zero.
    """
    batch, dim = x.shape
    width = weight.shape[1]
    out = torch.zeros_like(x)
    round_state = conv_state.dtype == torch.bfloat16 and weight.dtype == torch.bfloat16
    round_x = x.dtype == torch.bfloat16 and weight.dtype == torch.bfloat16
    for row in range(batch):
        slot = int(state_indices[row])
        if slot < 0:
            continue
        state = conv_state[slot]
        acc = torch.zeros(dim) if bias is None else bias.float().clone()
        for tap in range(width - 1):
            prod = state[:, tap].float() * weight[:, tap].float()
            acc = acc + (prod.bfloat16().float() if round_state else prod)
        prod = x[row].float() * weight[:, width - 1].float()
        acc = acc + (prod.bfloat16().float() if round_x else prod)
        acc = acc / (1 + torch.exp(-acc))
        out[row] = acc.to(x.dtype)
        shifted = torch.cat([state[:, 1:], x[row].to(state.dtype).unsqueeze(-1)], dim=-1)
        state.copy_(shifted)
    return out


def gated_rms_norm_reference(
    x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """fla's `rms_norm_gated` with a sigmoid gate, per row of the last dim, fp32 inside."""
    x32 = x.float()
    rstd = 1 / torch.sqrt(x32.square().mean(-1, keepdim=True) + eps)
    y = x32 * rstd
    if weight is not None:
        y = y * weight.float()
    y = y * torch.sigmoid(gate.float())
    return y.to(x.dtype)
