"""One GLM KDA layer on a small hybrid pool, driven the way the scheduler drives it.

Used by the device check (real kernels, CUDA) and by the CPU tests (reference kernels).
Imports sglang only when called.
"""

from __future__ import annotations

import dataclasses
import importlib
from types import SimpleNamespace
from typing import Any

import torch

from engine.patches.prefix_cache.config import TREE_UNIT, UNIT_ATTR


def wheel(module: str) -> Any:
    return importlib.import_module(module)


def opted_in_server_args(device_page: int) -> Any:
    """The fields the snapshot arithmetic reads, as the opted-in GLM engine has them."""
    cls = wheel("sglang.srt.server_args").ServerArgs
    args = object.__new__(cls)
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(args, f.name, f.default_factory())
    args.page_size = device_page
    args.mamba_scheduler_strategy = "extra_buffer"
    setattr(args, UNIT_ATTR, TREE_UNIT)
    return args


@dataclasses.dataclass
class Rig:
    backend: Any
    pool: Any
    layer: Any
    qkv: torch.Tensor
    gate: torch.Tensor
    beta: torch.Tensor

    def index(self, slots: list[int]) -> torch.Tensor:
        return torch.tensor(slots, device=self.qkv.device)

    def states(self, slot: int) -> list[torch.Tensor]:
        cache = self.pool.mamba2_layer_cache(0)
        return [c[slot].clone() for c in cache.conv] + [cache.temporal[slot].clone()]

    def extend(
        self, slot: int, start: int, end: int, track: tuple[int, int] | None
    ) -> tuple[Any, int | None]:
        """Extend tokens [start, end) in `slot`; with `track`, snapshot as the scheduler asks.

        Returns the output and the length the snapshot (in `track[0]`) was taken at.
        """
        dev = self.qkv.device
        n = end - start
        metadata_cls = wheel("sglang.srt.layers.attention.mamba.mamba2_metadata").ForwardMetadata
        qsl = torch.tensor([0, n], dtype=torch.int32, device=dev)
        cache_indices = torch.tensor([slot], dtype=torch.int32, device=dev)
        batch = SimpleNamespace(
            extend_prefix_lens=torch.tensor([start], device=dev),
            extend_seq_lens=torch.tensor([n], device=dev),
            extend_seq_lens_cpu=[n],
            mamba_track_mask=None,
            mamba_track_indices=None,
            mamba_track_seqlens=None,
        )
        fields: dict[str, Any] = {}
        snapshot: int | None = None
        if track is not None:
            req = SimpleNamespace(
                prefix_indices=torch.arange(start),
                extend_input_len=n,
                mamba_ping_pong_track_buffer=torch.tensor(track),
                mamba_next_track_idx=0,
                mamba_branching_seqlen=None,
                mamba_last_track_seqlen=None,
                mamba_pool_idx=torch.tensor(slot),
            )
            mask: list[bool] = []
            slots: list[int] = []
            seqlens: list[int] = []
            batch_cls = wheel("sglang.srt.managers.schedule_batch").ScheduleBatch
            owner = SimpleNamespace(req_to_token_pool=self.pool, tree_cache=None)
            batch_cls._mamba_radix_cache_v2_req_prepare_for_extend(owner, req, mask, slots, seqlens)
            batch.mamba_track_mask = torch.tensor(mask, device=dev)
            batch.mamba_track_indices = torch.tensor(slots, device=dev)
            batch.mamba_track_seqlens = torch.tensor(seqlens, device=dev)
            fields["track_conv_indices"] = self.backend._init_track_conv_indices(qsl, batch)
            names = ("track_ssm_h_src", "track_ssm_h_dst", "track_ssm_final_src")
            values = self.backend._init_track_ssm_indices(cache_indices, batch)
            fields.update(zip((*names, "track_ssm_final_dst"), values, strict=True))
            snapshot = req.mamba_last_track_seqlen
        self.backend.forward_metadata = metadata_cls(
            query_start_loc=qsl, mamba_cache_indices=cache_indices, **fields
        )
        output = self.backend.forward_extend(
            self.layer,
            batch,
            self.qkv[start:end],
            self.gate[start:end].unsqueeze(0),
            self.beta[start:end].unsqueeze(0),
        )
        return output, snapshot

    def decode(self, slot: int, position: int, track_slot: int | None) -> Any:
        dev = self.qkv.device
        metadata_cls = wheel("sglang.srt.layers.attention.mamba.mamba2_metadata").ForwardMetadata
        self.backend.forward_metadata = metadata_cls(
            query_start_loc=torch.tensor([0, 1], dtype=torch.int32, device=dev),
            mamba_cache_indices=torch.tensor([slot], dtype=torch.int32, device=dev),
        )
        batch = SimpleNamespace(batch_size=1, mamba_track_mask=None, mamba_track_indices=None)
        if track_slot is not None:
            # As ScheduleBatch.prepare_for_decode: the length after this token.
            batch.mamba_track_mask = torch.tensor([(position + 1) % TREE_UNIT == 0], device=dev)
            batch.mamba_track_indices = torch.tensor([track_slot], device=dev)
        p = slice(position, position + 1)
        return self.backend.forward_decode(
            self.layer,
            self.qkv[p],
            self.gate[p],
            self.beta[p].unsqueeze(0),
            forward_batch=batch,
        )


def make_rig(tokens: int, heads: int, head_dim: int, seed: int, device: str = "cuda") -> Rig:
    """One patched GLM KDA backend on a small hybrid pool, and random inputs for one layer."""
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(seed)
    mamba_utils = wheel("sglang.srt.configs.mamba_utils")
    shape = mamba_utils.KimiLinearStateShape.create(
        tp_world_size=1, num_heads=heads, head_dim=head_dim, conv_kernel_size=4
    )
    pool = wheel("sglang.srt.mem_cache.memory_pool").HybridReqToTokenPool(
        size=4,
        mamba_size=12,
        mamba_spec_state_size=4,
        max_context_len=tokens + 8,
        device=device,
        enable_memory_saver=False,
        cache_params=mamba_utils.KimiLinearCacheParams(shape=shape, layers=[0]),
        enable_mamba_extra_buffer=True,
    )
    backend_module = wheel("sglang.srt.layers.attention.linear.glm5_next_kda_backend")
    runner = SimpleNamespace(device=dev, req_to_token_pool=pool, token_to_kv_pool=None)
    backend = backend_module.Glm5NextKDAAttnBackend(runner)
    dim = heads * head_dim

    def rand(*size: int, scale: float = 1.0, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return (torch.randn(*size, generator=g, device=dev) * scale).to(dtype)

    layer = SimpleNamespace(
        layer_id=0,
        q_dim=dim,
        k_dim=dim,
        v_dim=dim,
        head_q_dim=head_dim,
        head_k_dim=head_dim,
        head_v_dim=head_dim,
        num_v_heads=heads,
        conv_weights=tuple(rand(dim, 4, scale=0.5, dtype=torch.float32) for _ in range(3)),
        bias=(None, None, None),
        A_log=rand(1, 1, heads, 1, scale=0.5, dtype=torch.float32),
        dt_bias=rand(dim, scale=0.5, dtype=torch.float32),
        lower_bound=-5.0,
    )
    return Rig(
        backend=backend,
        pool=pool,
        layer=layer,
        qkv=rand(tokens, 3 * dim),
        gate=rand(tokens, dim),
        beta=rand(tokens, heads),
    )
