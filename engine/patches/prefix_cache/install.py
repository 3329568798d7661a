"""What the prefix-cache patch replaces, module by module, and its on/off switch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType

from engine.patches.guard import sources_match, switch_on
from engine.patches.prefix_cache.config import chunk_size_property, opt_in_validator
from engine.patches.prefix_cache.hooks import (
    Installation,
    ModulePatch,
    Patcher,
    install_on_import,
    original,
)
from engine.patches.prefix_cache.scheduling import (
    align_chunk_continuation,
    align_truncation,
    build_tree_cache,
    check_extend_alignment,
    cut_first_chunk_at_head,
)
from engine.patches.prefix_cache.sources import EXPECTED_SOURCES

NAME = "prefix_cache"
ENV_VAR = "FLASHBOX_PREFIX_CACHE"


def _server_args(module: ModuleType, patcher: Patcher) -> None:
    cls = module.ServerArgs
    name = "_validate_glm5_next_session_ab_boundary"
    patcher.replace(cls, name, opt_in_validator(original(cls, name)))
    name = "mamba_cache_chunk_size"
    patcher.replace(cls, name, chunk_size_property(original(cls, name)))


def _scheduler(module: ModuleType, patcher: Patcher) -> None:
    cls = module.Scheduler
    name = "init_cache_with_memory_pool"
    patcher.replace(cls, name, build_tree_cache(original(cls, name)))
    name = "init_deterministic_inference_config"
    patcher.replace(cls, name, align_truncation(original(cls, name)))


def _schedule_policy(module: ModuleType, patcher: Patcher) -> None:
    cls = module.PrefillAdder
    name = "add_chunked_req"
    patcher.replace(cls, name, align_chunk_continuation(original(cls, name)))
    name = "add_one_req"
    patcher.replace(cls, name, cut_first_chunk_at_head(original(cls, name)))


def _schedule_batch(module: ModuleType, patcher: Patcher) -> None:
    cls = module.ScheduleBatch
    name = "_mamba_radix_cache_v2_req_prepare_for_extend"
    patcher.replace(cls, name, check_extend_alignment(original(cls, name)))


def _fla_kda(module: ModuleType, patcher: Patcher) -> None:
    # Not kda.py: this hook runs while the GLM backend module is importing fla.kda (see
    # chunk_states.py).
    from engine.patches.prefix_cache.chunk_states import capture_chunk_states

    name = "chunk_gated_delta_rule_fwd_h"
    patcher.replace(module, name, capture_chunk_states(original(module, name)))


def _kda_backend(module: ModuleType, patcher: Patcher) -> None:
    # The attention registry imports the class by name at model load, so rebinding the
    # module attribute is enough.
    from engine.patches.prefix_cache.kda import SnapshotKDAAttnBackend

    patcher.replace(module, "Glm5NextKDAAttnBackend", SnapshotKDAAttnBackend)


PATCHES: Mapping[str, Sequence[ModulePatch]] = {
    "sglang.srt.server_args": (_server_args,),
    "sglang.srt.managers.scheduler": (_scheduler,),
    "sglang.srt.managers.schedule_policy": (_schedule_policy,),
    "sglang.srt.managers.schedule_batch": (_schedule_batch,),
    "sglang.srt.layers.attention.fla.kda": (_fla_kda,),
    "sglang.srt.layers.attention.linear.glm5_next_kda_backend": (_kda_backend,),
}


def install(
    environ: Mapping[str, str] | None = None,
    expected: Mapping[str, str] = EXPECTED_SOURCES,
) -> Installation:
    """Attach the patches (applied when sglang imports each target); a no-op when off.

    Nothing is imported here: the source check runs when the first target is imported, and
    if any file differs from the one this patch was written for, nothing is patched.
    """
    if not switch_on(ENV_VAR, default=False, environ=environ):
        return Installation(active=False, reason=f"{ENV_VAR} is off")
    return install_on_import(dict(PATCHES), lambda: sources_match(expected, patch=NAME))
