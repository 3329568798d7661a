"""Test-only post-import patches that let sglang-kt serve the tiny hybrid (Qwen3-Next) model on
a CPU with its recurrent-state prefix cache on (never copied into an image).

sglang-kt's CPU path for gated-delta-net layers exists, but the prefix cache with
`--mamba-scheduler-strategy extra_buffer` is written for CUDA only: a start-up assert refuses
it, and the state tracking it needs is a Triton kernel plus names imported only when not on a
CPU. Each patch below runs right after its module is first imported (a `sys.meta_path` hook;
nothing is imported early) and says what it stands in for. None changes what the engine
computes on a GPU host: this file is only on PYTHONPATH for the CPU test engine.

Installed by sitecustomize when torch sees no CUDA device. Environment:
  FLASHBOX_CPU_HYBRID_PATCHES=0         install nothing
  FLASHBOX_CPU_DUMMY_WEIGHT_GAIN=<g>    re-draw `--load-format dummy` weights at a usable scale
                                        (see `_scale_dummy_weights`); unset or 0: leave them
  FLASHBOX_CPU_GLM_TREE=1               run the GLM prefix-cache patch's model-independent parts
                                        (256-token tree, chunk cuts, prompt heads) on this model
                                        (see `_glm_tree_opt_in`); needs FLASHBOX_PREFIX_CACHE=1
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import math
import os
import sys
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

GAIN_ENV = "FLASHBOX_CPU_DUMMY_WEIGHT_GAIN"
ENABLE_ENV = "FLASHBOX_CPU_HYBRID_PATCHES"
GLM_TREE_ENV = "FLASHBOX_CPU_GLM_TREE"

# The FLA chunk length (sglang.srt.layers.attention.fla.chunk_delta_h.CHUNK_SIZE): the
# scheduler's checkpoint grid inside a prefill.
FLA_CHUNK_SIZE = 64


# ---------------------------------------------------------------------------------------------
# the patches
# ---------------------------------------------------------------------------------------------


def _patch_server_args(module: Any) -> None:
    """Stands in for: a CUDA device at argument check. `_handle_mamba_radix_cache` asserts
    `is_cuda()` for `--mamba-scheduler-strategy extra_buffer` because the GPU build's state
    tracking is FLA/Triton; on the CPU the tracking runs on the torch ops and patches here, so
    the check is answered "yes" for the duration of that one method when the device is cpu."""
    cls = module.ServerArgs
    original = cls._handle_mamba_radix_cache
    if getattr(original, "_flashbox_cpu", False):
        return

    def _handle_mamba_radix_cache(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "device", None) != "cpu":
            return original(self, *args, **kwargs)
        saved = module.is_cuda
        module.is_cuda = lambda: True
        try:
            result = original(self, *args, **kwargs)
        finally:
            module.is_cuda = saved
        if _glm_tree():
            _glm_tree_opt_in(cls, self)
        return result

    _handle_mamba_radix_cache._flashbox_cpu = True  # type: ignore[attr-defined]
    cls._handle_mamba_radix_cache = _handle_mamba_radix_cache


def _patch_sgl_kernel_mamba(module: Any) -> None:
    """Stands in for: the per-chunk states of the FLA chunk kernel. sgl_kernel's CPU wrapper
    `chunk_gated_delta_rule_cpu` returns `h = None` (its C++ op does not return them), but the
    extra_buffer prefix cache copies a checkpoint out of `h` whenever a prefill ends between
    64-token chunk points. The wrapper is replaced by one that returns them from our torch
    implementation (sgl_kernel_cpu_ops); gdn_triton binds the name after this runs."""
    ops = importlib.import_module("sgl_kernel_cpu_ops")

    def chunk_gated_delta_rule_cpu(
        q: Any,
        k: Any,
        v: Any,
        g: Any,
        beta: Any,
        initial_state: Any,
        cu_seqlens: Any,
        head_first: bool,
        use_qk_l2norm_in_kernel: bool,
    ) -> tuple[Any, Any, Any]:
        assert not head_first, "only the [1, T, H, D] layout"
        result: tuple[Any, Any, Any] = ops.chunk_gated_delta_rule(
            q, k, v, g, beta, initial_state, cu_seqlens, use_qk_l2norm_in_kernel
        )
        return result

    module.chunk_gated_delta_rule_cpu = chunk_gated_delta_rule_cpu


def _patch_hybrid_backend(module: Any) -> None:
    """Stands in for: (1) `FLA_CHUNK_SIZE`, which the module imports only off the CPU yet uses
    in the extra_buffer tracking; (2) `track_mamba_states_if_needed`, a Triton kernel (Triton
    has no CPU target here) that copies each tracked request's conv and SSM state row from its
    working slot to its checkpoint slot after a decode step: the same copy in torch."""
    import torch

    if not hasattr(module, "FLA_CHUNK_SIZE"):
        module.FLA_CHUNK_SIZE = FLA_CHUNK_SIZE

    def track_mamba_states_if_needed(
        conv_states: torch.Tensor,
        ssm_states: torch.Tensor,
        cache_indices: torch.Tensor,
        mamba_track_mask: torch.Tensor,
        mamba_track_indices: torch.Tensor,
        batch_size: int,
    ) -> None:
        mask = mamba_track_mask[:batch_size].to(torch.bool)
        if not bool(mask.any()):
            return
        src = cache_indices[:batch_size][mask].long()
        dst = mamba_track_indices[:batch_size][mask].long()
        conv_states[dst] = conv_states[src]
        ssm_states[dst] = ssm_states[src]

    module.track_mamba_states_if_needed = track_mamba_states_if_needed


def _patch_layernorm_gated(module: Any) -> None:
    """Stands in for: the AMX check that routes the gated RMSNorm to sgl_kernel's CPU op.
    `_use_cpu` is `is_cpu() and cpu_has_amx_support()`, and "AMX support" means the whole
    sgl_kernel CPU library is loaded (which would also switch every linear layer to packed
    AMX weights); without it the norm goes to a Triton kernel. On the CPU the norm now always
    calls `fused_rmsnorm_gated_cpu` (registered by sgl_kernel_cpu_ops)."""
    if module.is_cpu():
        module._use_cpu = True


def _patch_model_loader(module: Any) -> None:
    """Wraps `DummyModelLoader.load_model` to re-draw the dummy weights (see
    `_scale_dummy_weights`) when FLASHBOX_CPU_DUMMY_WEIGHT_GAIN is set."""
    cls = module.DummyModelLoader
    original = cls.load_model
    if getattr(original, "_flashbox_cpu", False):
        return

    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        model = original(self, *args, **kwargs)
        gain = _gain()
        if gain > 0:
            _scale_dummy_weights(model, gain)
        return model

    load_model._flashbox_cpu = True  # type: ignore[attr-defined]
    cls.load_model = load_model


def _gain() -> float:
    try:
        return float(os.environ.get(GAIN_ENV, "0") or 0)
    except ValueError:
        return 0.0


def _scale_dummy_weights(model: Any, gain: float) -> None:
    """Stands in for: trained weights. `--load-format dummy` draws every weight from
    U(-1e-3, 1e-3) with one seed for all, so a tiny model's logits are flat (greedy decoding
    then rides on rounding noise and says nothing about cache correctness) and the gated
    RMSNorm (a plain scale, not 1 + w) all but mutes the linear-attention layers. This draws
    each matrix from U(-b, b), b = gain * sqrt(3 / fan_in) (fan_in: last dim), seeded by the
    parameter's name, so the same model comes out on every start; vectors get U(-0.1, 0.1),
    and the gated RMSNorm weight 1 + U(-0.1, 0.1). Test data only."""
    import torch

    with torch.no_grad():
        for name, param in model.state_dict().items():
            if not torch.is_floating_point(param):
                continue
            generator = torch.Generator(device=param.device)
            generator.manual_seed(zlib.crc32(name.encode()) + 5310)
            values = torch.empty(param.shape, dtype=torch.float32, device=param.device)
            if param.dim() >= 2:
                bound = gain * math.sqrt(3.0 / max(1, param.shape[-1]))
                values.uniform_(-bound, bound, generator=generator)
            else:
                values.uniform_(-0.1, 0.1, generator=generator)
                if name.endswith("linear_attn.norm.weight"):
                    values += 1.0
            param.copy_(values.to(param.dtype))


def _glm_tree() -> bool:
    return os.environ.get(GLM_TREE_ENV, "0") == "1"


def _glm_tree_opt_in(cls: Any, args: Any) -> None:
    """Stands in for: GLM-5-Next. The prefix-cache patch (engine/patches/prefix_cache) turns
    itself on inside GLM's own server-args validator, and GLM cannot run on a CPU. With
    FLASHBOX_CPU_GLM_TREE=1 the patch's opt-in runs here instead, for this hybrid model, at the
    point where GLM's validator runs (model-specific adjustments, main process): the patch's
    own checks, then its unit set on the ServerArgs, which is pickled to the scheduler. GLM's
    stock checks (FP8 weights, CUDA, ...) are left out; they are not the patch's."""
    validator = vars(cls).get("_validate_glm5_next_session_ab_boundary")
    if not hasattr(validator, "__wrapped__"):
        raise RuntimeError(
            f"{GLM_TREE_ENV}=1: the prefix-cache patch is not installed in this process "
            "(set FLASHBOX_PREFIX_CACHE=1; the engine log says why it was skipped)"
        )
    config = importlib.import_module("engine.patches.prefix_cache.config")
    config.opt_in_validator(lambda _args: None)(args)


def _patch_scheduler_tree(module: Any) -> None:
    """Stands in for: GLM-5-Next's tree selection. The patch's `build_tree_cache` swaps the
    scheduler's `RadixCache` for its `GlmMambaRadixCache`, the class the stock code builds for
    GLM; for a GDN model the stock code builds `MambaRadixCache` instead (imported inside the
    method), so with FLASHBOX_CPU_GLM_TREE=1 and the patch's unit on the server args that
    name is swapped too, for the duration of the call. The patch's own check that the
    scheduler got its tree still runs."""
    cls = module.Scheduler
    inner = cls.init_cache_with_memory_pool
    if getattr(inner, "_flashbox_cpu", False):
        return

    def init_cache_with_memory_pool(self: Any) -> None:
        config = importlib.import_module("engine.patches.prefix_cache.config")
        unit = getattr(self.server_args, config.UNIT_ATTR, None)
        if not _glm_tree() or unit is None:
            inner(self)
            return
        # Before the swap: the tree class subclasses the stock one at import.
        tree = importlib.import_module("engine.patches.prefix_cache.tree")
        mamba: Any = importlib.import_module("sglang.srt.mem_cache.mamba_radix_cache")
        stock = vars(mamba)["MambaRadixCache"]
        mamba.MambaRadixCache = functools.partial(
            tree.GlmMambaRadixCache,
            unit=unit,
            head_interval=self.server_args.mamba_track_interval,
        )
        try:
            inner(self)
        finally:
            mamba.MambaRadixCache = stock
        if not isinstance(self.tree_cache, tree.GlmMambaRadixCache):
            raise RuntimeError(
                f"{GLM_TREE_ENV}=1: the scheduler built {type(self.tree_cache).__name__}, "
                "not the GLM tree"
            )

    init_cache_with_memory_pool._flashbox_cpu = True  # type: ignore[attr-defined]
    init_cache_with_memory_pool.__wrapped__ = inner  # type: ignore[attr-defined]
    cls.init_cache_with_memory_pool = init_cache_with_memory_pool


def _patch_page_one_allocator(module: Any) -> None:
    """Stands in for: GLM's paged KV allocator (64-token pages). `mem_cache/common.py` picks
    the page-1 or the paged allocation call by the *tree's* page size, and the GLM tree's is
    256 while this CPU engine's KV allocator has 1-token pages, which answer only the page-1
    call (`alloc_extend is only for paged allocator`). With FLASHBOX_CPU_GLM_TREE=1 the page-1
    allocator also answers the paged calls, as pages of one token: one free slot per new
    token, in request order, exactly what the page-1 call returns."""
    if not _glm_tree():
        return
    cls = module.TokenToKVPoolAllocator
    if getattr(cls, "_flashbox_cpu", False):
        return

    def alloc_extend(
        self: Any,
        prefix_lens: Any,
        prefix_lens_cpu: Any,
        seq_lens: Any,
        seq_lens_cpu: Any,
        last_loc: Any,
        extend_num_tokens: int,
    ) -> Any:
        return self.alloc(extend_num_tokens)

    def alloc_decode(self: Any, seq_lens: Any, seq_lens_cpu: Any, last_loc: Any) -> Any:
        return self.alloc(len(seq_lens))

    cls.alloc_extend = alloc_extend
    cls.alloc_decode = alloc_decode
    cls._flashbox_cpu = True


_PATCHES: dict[str, Callable[[Any], None]] = {
    "sglang.srt.server_args": _patch_server_args,
    "sglang.srt.managers.scheduler": _patch_scheduler_tree,
    "sglang.srt.mem_cache.allocator": _patch_page_one_allocator,
    "sgl_kernel.mamba": _patch_sgl_kernel_mamba,
    "sglang.srt.layers.attention.hybrid_linear_attn_backend": _patch_hybrid_backend,
    "sglang.srt.layers.attention.fla.layernorm_gated": _patch_layernorm_gated,
    "sglang.srt.model_loader.loader": _patch_model_loader,
}


# ---------------------------------------------------------------------------------------------
# the post-import hook
# ---------------------------------------------------------------------------------------------


def _apply(name: str, module: ModuleType) -> None:
    try:
        _PATCHES[name](module)
    except Exception as exc:  # a failed patch must not hide the engine's own error
        print(f"flashbox hybrid_patches: patching {name} failed: {exc!r}", file=sys.stderr)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _apply(self._name, module)

    def __getattr__(self, attr: str) -> Any:  # get_code, get_source, ... for tools
        return getattr(self._inner, attr)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _PATCHES or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, fullname)
        return spec


_INSTALLED = False


def install() -> None:
    """Patch the listed modules when they are imported (now, for any already imported)."""
    global _INSTALLED
    if _INSTALLED or os.environ.get(ENABLE_ENV, "1") == "0":
        return
    _INSTALLED = True
    sys.meta_path.insert(0, _PostImportFinder())
    for name in _PATCHES:
        if name in sys.modules:
            _apply(name, sys.modules[name])
