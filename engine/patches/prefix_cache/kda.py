"""KDA state snapshots for GLM-5-Next: the writes the stock GLM backend never makes.

With `extra_buffer`, the scheduler gives every request two track slots and asks the
backend to copy the request's state into one of them at 256-token points: in prefill at
`prefix + floor(extend / unit) * unit`, in decode when the length is a multiple of the track
interval. SGLang's GDN backend does this; GLM's KDA backend does not. This subclass adds it:
the three q/k/v conv windows and the SSM state, per layer.

Imported only once sglang's GLM KDA backend is loaded (from the import hook).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from sglang.srt.layers.attention.hybrid_linear_attn_backend import (  # type: ignore[import-not-found]
    track_mamba_states_if_needed,
)
from sglang.srt.layers.attention.linear.glm5_next_kda_backend import (  # type: ignore[import-not-found]
    Glm5NextKDAAttnBackend,
)

from engine.patches.prefix_cache.chunk_states import CHUNK_STATES


def glm_conv_states_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """GLM stores a conv window as (K-1, dim); SGLang's base class reads K-1 from the last axis.

    Reporting the transposed shape lets the base class's snapshot index arithmetic
    (`_init_track_conv_indices`) take the window length from the right axis.
    """
    *lead, window, dim = shape
    return (*lead, dim, window)


def write_conv_snapshots(
    mixed_qkv: torch.Tensor,
    split: Sequence[int],
    conv_states: Sequence[torch.Tensor],
    window_indices: torch.Tensor,
    dst_slots: torch.Tensor,
) -> None:
    """Store, per tracked request, the raw q/k/v inputs its snapshot's conv windows hold.

    `window_indices` is [tracked, K-1] packed-token positions (inputs L-K+1 .. L-1 of a
    snapshot at length L); GLM's conv state rows are (K-1, dim), matching the gather.
    """
    for part, state in zip(torch.split(mixed_qkv, list(split), dim=-1), conv_states, strict=True):
        state[dst_slots] = part[window_indices].to(state.dtype)


def write_decode_snapshots(
    conv_states: Sequence[torch.Tensor],
    ssm_states: torch.Tensor,
    cache_indices: torch.Tensor,
    track_mask: torch.Tensor,
    track_slots: torch.Tensor,
    batch_size: int,
) -> None:
    """Copy working-slot states into track slots where the mask says so; graph-safe.

    SGLang's Triton copy moves one row of two tensors per launch, with a fixed grid and no
    host synchronisation, so it can be captured in a CUDA graph; two launches cover GLM's
    three conv windows and its SSM state.
    """
    q_conv, k_conv, v_conv = conv_states
    track_mamba_states_if_needed(
        q_conv, ssm_states, cache_indices, track_mask, track_slots, batch_size
    )
    track_mamba_states_if_needed(k_conv, v_conv, cache_indices, track_mask, track_slots, batch_size)


class SnapshotKDAAttnBackend(Glm5NextKDAAttnBackend):  # type: ignore[misc]
    """GLM's KDA backend plus the track-slot writes the prefix cache restores from."""

    def __init__(self, model_runner: Any) -> None:
        super().__init__(model_runner)
        conv = self.req_to_token_pool.mamba_pool.mamba_cache.conv[0]
        self.conv_states_shape = glm_conv_states_shape(tuple(conv.shape))

    def forward_decode(
        self, layer: Any, mixed_qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, **kwargs: Any
    ) -> Any:
        output = super().forward_decode(layer, mixed_qkv, a, b, **kwargs)
        forward_batch = kwargs.get("forward_batch")
        if forward_batch is not None and forward_batch.mamba_track_mask is not None:
            cache = self.req_to_token_pool.mamba2_layer_cache(layer.layer_id)
            write_decode_snapshots(
                cache.conv,
                cache.temporal,
                self.forward_metadata.mamba_cache_indices,
                forward_batch.mamba_track_mask,
                forward_batch.mamba_track_indices,
                forward_batch.batch_size,
            )
        return output

    def forward_extend(
        self,
        layer: Any,
        forward_batch: Any,
        mixed_qkv: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        **kwargs: Any,
    ) -> Any:
        metadata = self.forward_metadata
        if metadata.track_conv_indices is None:
            return super().forward_extend(layer, forward_batch, mixed_qkv, a, b, **kwargs)
        cache = self.req_to_token_pool.mamba2_layer_cache(layer.layer_id)
        mask = forward_batch.mamba_track_mask
        write_conv_snapshots(
            mixed_qkv,
            (layer.q_dim, layer.k_dim, layer.v_dim),
            cache.conv,
            metadata.track_conv_indices,
            forward_batch.mamba_track_indices[mask.nonzero(as_tuple=True)[0]],
        )
        sink: list[torch.Tensor] = []
        token = CHUNK_STATES.set(sink)
        try:
            output = super().forward_extend(layer, forward_batch, mixed_qkv, a, b, **kwargs)
        finally:
            CHUNK_STATES.reset(token)
        if len(sink) != 1:
            raise RuntimeError(
                f"GLM KDA extend produced {len(sink)} chunk-state tensors, expected 1: "
                "cannot write the prefix-cache snapshot"
            )
        self._track_mamba_state_extend(forward_batch, sink[0], cache.temporal, metadata)
        return output
