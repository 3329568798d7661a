"""Doctor checks of what the engine will run: the model directory, prefix cache, the profile."""

from __future__ import annotations

from engine.doctor.model_dir import ModelDir
from engine.doctor.report import Check, fail, ok, skip, warn
from engine.launch import prefix_cache
from engine.launch.host import HostFacts
from engine.launch.plan import LaunchPlan
from engine.launch.profile import EngineProfile


def model_dir(profile: EngineProfile, found: ModelDir | None, why_missing: str) -> Check:
    name = "model directory"
    if found is None:
        return skip(name, why_missing, "Pass --model-dir DIR (the downloaded checkpoint).")
    where = str(found.path)
    if found.config_error is not None:
        return fail(
            name,
            f"{where}: {found.config_error}",
            "Point --model-dir (and FLASHBOX_MODEL_DIR in .env) at the downloaded checkpoint.",
        )
    want_arch = profile.model.architecture
    if want_arch is not None and want_arch not in found.architectures:
        got = ", ".join(found.architectures) or "none"
        return fail(
            name,
            f"{where}: architectures {got}",
            f"This profile serves {want_arch}: use that checkpoint or another profile.",
        )
    want_quant = profile.model.quantization
    if want_quant is not None and (found.quant_method or "").lower() != want_quant.lower():
        return fail(
            name,
            f"{where}: quantization {found.quant_method or 'none'}",
            f"The engine needs the checkpoint-native {want_quant} weights (no conversion).",
        )
    if found.weight_files == 0:
        return fail(
            name, f"{where}: no .safetensors files", "Finish downloading the model's weights."
        )
    summary = (
        f"{where}: {', '.join(found.architectures) or 'config.json'}, "
        f"{found.weight_files} weight files, {found.weights_gb:.0f} GB"
    )
    if found.chat_template is None:
        return warn(
            name,
            f"{summary}; no chat template",
            "Copy chat_template.jinja from the model's repository into the directory.",
        )
    return ok(name, f"{summary}; chat template in {found.chat_template}")


def state_pool(profile: EngineProfile, host: HostFacts, available: bool) -> Check:
    """Prefix-cache slots: GPU memory they take and the running-request cap they imply."""
    name = "prefix cache"
    cache = profile.prefix_cache
    if not cache.enabled:
        return ok(name, "off in the profile: every turn is prefilled from scratch")
    if not available:
        return warn(
            name,
            f"requested, but {prefix_cache.PATCH_MODULE} is not in this install: off",
            "Rebuild the engine image from this repository (`docker compose build engine`).",
        )
    tp = profile.gpu_section.tp_size
    budget = (
        prefix_cache.static_budget_mib(
            host.gpus[0].memory_mib, profile.gpu_section.mem_fraction_static
        )
        if host.gpus
        else None
    )
    slots = cache.slots
    if slots == "auto":
        if budget is None:
            return skip(name, "slots: auto needs a GPU to size the pool")
        slots = prefix_cache.auto_slots(budget, cache.max_gpu_share, cache.slot_mib_tp1, tp)
    pool = prefix_cache.pool_mib(slots, cache.slot_mib_tp1, tp)
    found = (
        f"{slots} slots x {cache.slot_mib_tp1 / tp:.0f} MiB = {pool / 1024:.1f} GiB GPU "
        f"(TP{tp}); at most {prefix_cache.running_cap(slots)} running requests"
    )
    if budget is None:
        return ok(name, found)
    found += f"; {pool / budget:.0%} of the {budget / 1024:.1f} GiB static budget"
    if pool > budget:
        return fail(name, found, "Lower prefix_cache.slots (or use slots: auto).")
    if pool > budget * cache.max_gpu_share:
        return warn(name, found, "Little GPU memory is left for the KV cache: lower the slots.")
    return ok(name, found)


def profile_fit(profile: EngineProfile, plan: LaunchPlan) -> Check:
    name = "profile"
    if plan.problems:
        return fail(
            name,
            f"{profile.name} does not fit: " + "; ".join(plan.problems),
            "Fix the FAIL lines above, or write a profile for this host under config/engine/.",
        )
    return ok(name, f"{profile.name} fits this host")
