"""Whether this install carries the engine's prefix-cache change for the hybrid model.

Stock sglang-kt 0.7.2 forces the radix cache off for this model, so turning on the
`extra_buffer` state strategy there would do nothing useful (or fail at startup). The change
lives in the module below; the image carries it when the module is importable. An operator can
override the detection either way with FLASHBOX_PREFIX_CACHE_AVAILABLE=1/0 (for instance to
keep the cache off on an image whose warm-rerun check failed).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping

PATCH_MODULE = "engine.patches.prefix_cache"
AVAILABLE_ENV = "FLASHBOX_PREFIX_CACHE_AVAILABLE"
# The switch the patch reads in the engine process.
SWITCH_ENV = "FLASHBOX_PREFIX_CACHE"
# SGLang caps running requests at slots // 5 under the extra_buffer strategy
# (one working slot plus ping-pong track slots per request, with headroom).
SLOTS_PER_RUNNING_REQUEST = 5

ModuleFinder = Callable[[str], bool]


def module_present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def change_available(environ: Mapping[str, str], finder: ModuleFinder = module_present) -> bool:
    override = environ.get(AVAILABLE_ENV, "").strip().lower()
    if override in {"1", "true", "yes", "on"}:
        return True
    if override in {"0", "false", "no", "off"}:
        return False
    return finder(PATCH_MODULE)


def running_cap(slots: int) -> int:
    return slots // SLOTS_PER_RUNNING_REQUEST


def pool_mib(slots: int, slot_mib_tp1: float, tp_size: int) -> float:
    # The recurrent state is split across tensor-parallel ranks by head.
    return slots * slot_mib_tp1 / tp_size


def static_budget_mib(gpu_memory_mib: int, mem_fraction_static: float) -> float:
    """GPU memory SGLang reserves for weights, KV cache and the state pool."""
    return gpu_memory_mib * mem_fraction_static


def auto_slots(budget_mib: float, max_gpu_share: float, slot_mib_tp1: float, tp_size: int) -> int:
    """The most slots whose pool stays within `max_gpu_share` of the static budget."""
    return int(budget_mib * max_gpu_share // (slot_mib_tp1 / tp_size))
