"""Drop-in replacements for the wheel's functions, each falling back to the original.

Every replacement keeps the original's signature and return contract, acts only on CUDA
tensors it reproduces exactly (see each kernel's `*_supported`), and otherwise calls the
original, so CPU paths, other models and odd shapes behave exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from engine.patches.kernels import gate_topk, hc_post, hc_pre, kda_decode
from engine.patches.kernels.settings import MARKER, KernelSettings

__all__ = ["MARKER"]

AnyFn = Callable[..., Any]


def _mark(fn: AnyFn, original: AnyFn, name: str) -> AnyFn:
    # Like the wheel's own mHC dispatch: a compiled region calls the launcher as is rather
    # than tracing a raw-pointer Triton launch.
    fn = torch.compiler.disable(fn)  # type: ignore[no-untyped-call]
    setattr(fn, MARKER, name)
    fn.__wrapped__ = original  # type: ignore[attr-defined]
    fn.__name__ = getattr(original, "__name__", name)
    fn.__doc__ = getattr(original, "__doc__", None)
    return fn


def make_hc_pre(original: AnyFn, settings: KernelSettings) -> AnyFn:
    def fused_hc_pre(
        x: torch.Tensor,
        hc_fn: torch.Tensor,
        hc_scale: torch.Tensor,
        hc_base: torch.Tensor,
        hc_mult: int,
        rms_eps: float,
        hc_eps: float,
        sinkhorn_iters: int,
        post_mult_value: float = 2.0,
        hc_norm_weight: torch.Tensor | None = None,
        out_norm_weight: torch.Tensor | None = None,
        out_norm_eps: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
        if x.is_cuda and hc_pre.hc_pre_supported(
            x, hc_fn, hc_mult, hc_norm_weight, settings.hc_pre_max_tokens
        ):
            return hc_pre.hc_pre(
                x,
                hc_fn,
                hc_scale,
                hc_base,
                hc_mult,
                rms_eps,
                hc_eps,
                sinkhorn_iters,
                post_mult_value,
                out_norm_weight if settings.hc_pre_norm else None,
                out_norm_eps,
            )
        result: tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool] = original(
            x=x,
            hc_fn=hc_fn,
            hc_scale=hc_scale,
            hc_base=hc_base,
            hc_mult=hc_mult,
            rms_eps=rms_eps,
            hc_eps=hc_eps,
            sinkhorn_iters=sinkhorn_iters,
            post_mult_value=post_mult_value,
            hc_norm_weight=hc_norm_weight,
            out_norm_weight=out_norm_weight,
            out_norm_eps=out_norm_eps,
        )
        return result

    return _mark(fused_hc_pre, original, "hc_pre")


def make_hc_post(original: AnyFn) -> AnyFn:
    def fused_hc_post(
        hidden_states: torch.Tensor,
        residual: torch.Tensor,
        h_res: torch.Tensor,
        h_post: torch.Tensor,
        hc_mult: int,
    ) -> torch.Tensor:
        if hidden_states.is_cuda and hc_post.hc_post_supported(
            hidden_states, residual, h_res, h_post, hc_mult
        ):
            return hc_post.hc_post(hidden_states, residual, h_res, h_post, hc_mult)
        result: torch.Tensor = original(
            hidden_states=hidden_states,
            residual=residual,
            h_res=h_res,
            h_post=h_post,
            hc_mult=hc_mult,
        )
        return result

    return _mark(fused_hc_post, original, "hc_post")


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def make_biased_grouped_topk(original: AnyFn) -> AnyFn:
    def fused_biased_grouped_topk(
        hidden_states: torch.Tensor,
        gating_output: torch.Tensor,
        correction_bias: torch.Tensor,
        topk: int,
        renormalize: bool,
        num_expert_group: int | None = None,
        topk_group: int | None = None,
        num_fused_shared_experts: int = 0,
        routed_scaling_factor: float | None = None,
        apply_routed_scaling_factor_on_output: bool | None = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Power-of-two expert counts already get the wheel's fused gate kernels.
        if (
            gating_output.is_cuda
            and gating_output.ndim == 2
            and not _power_of_two(gating_output.shape[1])
            and hidden_states.shape[0] == gating_output.shape[0]
            and gate_topk.biased_topk_supported(
                gating_output,
                correction_bias,
                topk,
                num_expert_group,
                topk_group,
                num_fused_shared_experts,
            )
        ):
            return gate_topk.biased_topk(
                gating_output,
                correction_bias,
                topk,
                renormalize,
                routed_scaling_factor,
                bool(apply_routed_scaling_factor_on_output),
            )
        result: tuple[torch.Tensor, torch.Tensor] = original(
            hidden_states=hidden_states,
            gating_output=gating_output,
            correction_bias=correction_bias,
            topk=topk,
            renormalize=renormalize,
            num_expert_group=num_expert_group,
            topk_group=topk_group,
            num_fused_shared_experts=num_fused_shared_experts,
            routed_scaling_factor=routed_scaling_factor,
            apply_routed_scaling_factor_on_output=apply_routed_scaling_factor_on_output,
        )
        return result

    return _mark(fused_biased_grouped_topk, original, "gate_topk")


def kda_inputs(
    backend: Any, layer: Any, mixed_qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor
) -> kda_decode.KdaDecodeInputs:
    """Gather one decode step's tensors the way the wheel's `forward_decode` finds them."""
    cache = backend.req_to_token_pool.mamba2_layer_cache(layer.layer_id)
    q_state, k_state, v_state = cache.conv
    biases = tuple(layer.bias) if layer.bias is not None else (None, None, None)
    return kda_decode.KdaDecodeInputs(
        mixed_qkv=mixed_qkv,
        # GLM stores conv states as [slots, W-1, dim]; the kernels read [slots, dim, W-1].
        conv_states=(
            q_state.transpose(-1, -2),
            k_state.transpose(-1, -2),
            v_state.transpose(-1, -2),
        ),
        conv_weights=tuple(layer.conv_weights),
        conv_biases=biases,
        raw_gate=a,
        raw_beta=b,
        a_log=layer.A_log,
        dt_bias=layer.dt_bias,
        ssm_states=cache.temporal,
        cache_indices=backend.forward_metadata.mamba_cache_indices,
        lower_bound=float(backend._lower_bound(layer)),
        num_heads=int(layer.num_v_heads),
        head_k_dim=int(layer.head_k_dim),
        head_v_dim=int(layer.head_v_dim),
    )


def _same_heads(layer: Any) -> bool:
    return bool(
        layer.num_q_heads == layer.num_k_heads == layer.num_v_heads
        and layer.head_q_dim == layer.head_k_dim
    )


def make_forward_decode(original: AnyFn) -> AnyFn:
    def fused_forward_decode(
        self: Any, layer: Any, mixed_qkv: Any, a: torch.Tensor, b: torch.Tensor, **kwargs: Any
    ) -> torch.Tensor:
        if isinstance(mixed_qkv, torch.Tensor) and mixed_qkv.is_cuda and _same_heads(layer):
            inputs = kda_inputs(self, layer, mixed_qkv, a, b)
            if kda_decode.kda_decode_supported(inputs):
                return kda_decode.kda_decode(inputs)
        result: torch.Tensor = original(self, layer, mixed_qkv, a, b, **kwargs)
        return result

    return _mark(fused_forward_decode, original, "kda_decode")


def make_indexer_iter(original: AnyFn, query_chunk: int) -> AnyFn:
    def chunked_iter(*args: Any, **kwargs: Any) -> Iterator[tuple[int, int, torch.Tensor]]:
        kwargs.setdefault("query_chunk_size", query_chunk)
        result: Iterator[tuple[int, int, torch.Tensor]] = original(*args, **kwargs)
        return result

    return _mark(chunked_iter, original, "indexer_query_chunk")
