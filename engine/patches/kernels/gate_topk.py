"""Biased sigmoid gate top-k in one launch (one program per token).

Sigmoid scores; the correction bias is added only to choose experts; the weights are the
unbiased scores of the chosen experts, renormalised and optionally scaled. 288 experts is
not a power of two, so the wheel's fused gate kernels skip it and run an eager/compiled
chain instead. Ties on the biased score go to the lower expert id (`tl.argmax` keeps the
first maximum); the wheel's `torch.topk(sorted=False)` leaves ties unordered.
"""

from __future__ import annotations

import torch
import triton  # type: ignore[import-untyped]
import triton.language as tl  # type: ignore[import-untyped]

# Largest expert count held in one program's registers.
MAX_EXPERTS = 4096
MAX_TOPK = 32


@triton.jit  # type: ignore[untyped-decorator]
def _biased_topk_kernel(  # type: ignore[no-untyped-def]
    logits_ptr,  # [T, E]
    bias_ptr,  # [E]
    weights_ptr,  # [T, K] fp32
    ids_ptr,  # [T, K] int32
    E,
    stride_t,
    scale,
    K: tl.constexpr,
    KP: tl.constexpr,
    BLOCK_E: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    APPLY_SCALE: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_E)
    mask = offs < E
    logits = tl.load(logits_ptr + t * stride_t + offs, mask=mask, other=0.0).to(tl.float32)
    scores = tl.sigmoid(logits)
    choice = scores + tl.load(bias_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    choice = tl.where(mask, choice, float("-inf"))
    slots = tl.arange(0, KP)
    ids = tl.zeros([KP], dtype=tl.int32)
    weights = tl.zeros([KP], dtype=tl.float32)
    for k in tl.static_range(K):
        best = tl.argmax(choice, axis=0, tie_break_left=True)
        picked = offs == best
        w = tl.sum(tl.where(picked, scores, 0.0), axis=0)
        ids = tl.where(slots == k, best.to(tl.int32), ids)
        weights = tl.where(slots == k, w, weights)
        choice = tl.where(picked, float("-inf"), choice)
    if RENORMALIZE:
        weights = weights / tl.sum(weights, axis=0)
        if APPLY_SCALE:
            weights = weights * scale
    out_mask = slots < K
    tl.store(weights_ptr + t * K + slots, weights, mask=out_mask)
    tl.store(ids_ptr + t * K + slots, ids, mask=out_mask)


def biased_topk_supported(
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor | None,
    topk: int,
    num_expert_group: int | None,
    topk_group: int | None,
    num_fused_shared_experts: int,
) -> bool:
    """The one-group case GLM uses (all groups kept is the same selection); no shared slot."""
    if gating_output.ndim != 2 or correction_bias is None or gating_output.shape[0] == 0:
        return False
    experts = gating_output.shape[1]
    groups_all_kept = num_expert_group is None or topk_group == num_expert_group
    return (
        groups_all_kept
        and num_fused_shared_experts == 0
        and 0 < topk <= min(MAX_TOPK, experts)
        and experts <= MAX_EXPERTS
        and correction_bias.shape == (experts,)
        and gating_output.dtype in (torch.float32, torch.bfloat16, torch.float16)
    )


def biased_topk(
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor,
    topk: int,
    renormalize: bool,
    routed_scaling_factor: float | None = None,
    apply_routed_scaling_factor_on_output: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(topk_weights fp32 [T,K], topk_ids int32 [T,K])`, ids in selection order."""
    tokens, experts = gating_output.shape
    logits = gating_output if gating_output.stride(1) == 1 else gating_output.contiguous()
    weights = torch.empty((tokens, topk), dtype=torch.float32, device=logits.device)
    ids = torch.empty((tokens, topk), dtype=torch.int32, device=logits.device)
    scale = 1.0 if routed_scaling_factor is None else float(routed_scaling_factor)
    _biased_topk_kernel[(tokens,)](
        logits,
        correction_bias.contiguous(),
        weights,
        ids,
        experts,
        logits.stride(0),
        scale,
        K=topk,
        KP=triton.next_power_of_2(topk),
        BLOCK_E=triton.next_power_of_2(experts),
        RENORMALIZE=renormalize,
        APPLY_SCALE=apply_routed_scaling_factor_on_output and routed_scaling_factor is not None,
    )
    return weights, ids
