"""Small real sglang objects for the prefix-cache tests (CPU tensors, the wheel's own classes)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from engine.patches.prefix_cache.hooks import Installation
from engine.patches.prefix_cache.install import ENV_VAR, install

KV_PAGE = 64  # GLM forces 64-token KV pages


def wheel(module: str) -> Any:
    """A module of the unzipped wheel (untyped: sglang-kt is not installed for mypy)."""
    return importlib.import_module(module)


@contextmanager
def prefix_cache_on() -> Iterator[Installation]:
    installation = install(environ={ENV_VAR: "1"})
    try:
        assert installation.active
        yield installation
    finally:
        installation.undo()


def server_args(**overrides: Any) -> Any:
    """A ServerArgs with its defaults and a GLM prefix-cache launch, without `__post_init__`.

    `__post_init__` probes the GPU and the model; the validators under test only read fields.
    """
    ServerArgs = wheel("sglang.srt.server_args").ServerArgs

    args = object.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(args, f.name, f.default_factory())
        else:
            setattr(args, f.name, None)
    launch = {
        "model_path": "GLM-5.3-Flash",
        "quantization": "fp8",
        "tp_size": 1,
        "page_size": KV_PAGE,
        "mamba_scheduler_strategy": "extra_buffer",
        "mamba_track_interval": 256,
        "chunked_prefill_size": 8192,
        "max_mamba_cache_size": 16,
    }
    for key, value in {**launch, **overrides}.items():
        setattr(args, key, value)
    return args


@contextmanager
def global_server_args(args: Any) -> Iterator[Any]:
    module = wheel("sglang.srt.server_args")

    saved = module._global_server_args
    module.set_global_server_args_for_scheduler(args)
    try:
        yield args
    finally:
        module._global_server_args = saved


@dataclasses.dataclass(frozen=True)
class Pools:
    req_to_token: Any
    allocator: Any
    kv_tokens: int


def pools(
    *, slots: int = 16, requests: int = 4, kv_tokens: int = 64 * KV_PAGE, heads: int = 2
) -> Pools:
    """A hybrid request pool (KDA states, extra_buffer) and a 64-token paged KV allocator."""
    KimiLinearCacheParams = wheel("sglang.srt.configs.mamba_utils").KimiLinearCacheParams
    KimiLinearStateShape = wheel("sglang.srt.configs.mamba_utils").KimiLinearStateShape
    PagedTokenToKVPoolAllocator = wheel(
        "sglang.srt.mem_cache.allocator"
    ).PagedTokenToKVPoolAllocator
    HybridReqToTokenPool = wheel("sglang.srt.mem_cache.memory_pool").HybridReqToTokenPool

    shape = KimiLinearStateShape.create(
        tp_world_size=1, num_heads=heads, head_dim=8, conv_kernel_size=4
    )
    params = KimiLinearCacheParams(shape=shape, layers=[0, 1])
    req_to_token = HybridReqToTokenPool(
        size=requests,
        mamba_size=slots,
        mamba_spec_state_size=requests,
        max_context_len=8192,
        device="cpu",
        enable_memory_saver=False,
        cache_params=params,
        enable_mamba_extra_buffer=True,
    )
    allocator = PagedTokenToKVPoolAllocator(
        kv_tokens, KV_PAGE, torch.float16, "cpu", kvcache=None, need_sort=False
    )
    return Pools(req_to_token=req_to_token, allocator=allocator, kv_tokens=kv_tokens)


def cache_params(p: Pools, **overrides: Any) -> Any:
    CacheInitParams = wheel("sglang.srt.mem_cache.cache_init_params").CacheInitParams

    values: dict[str, Any] = {
        "disable": False,
        "req_to_token_pool": p.req_to_token,
        "token_to_kv_pool_allocator": p.allocator,
        "page_size": KV_PAGE,
        "enable_mamba_extra_buffer": True,
        "chunked_prefill_size": 8192,
    }
    values.update(overrides)
    return CacheInitParams(**values)


def fill_slot(p: Pools, slot: int, value: float) -> None:
    """Write a recognisable value into every state tensor of one mamba slot."""
    cache = p.req_to_token.mamba_pool.mamba_cache
    for conv in cache.conv:
        conv[:, slot] = value
    cache.temporal[:, slot] = value


def slot_values(p: Pools, slot: int) -> list[torch.Tensor]:
    cache = p.req_to_token.mamba_pool.mamba_cache
    return [conv[:, slot].clone() for conv in cache.conv] + [cache.temporal[:, slot].clone()]
