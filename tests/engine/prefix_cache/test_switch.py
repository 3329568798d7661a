"""Switch off: the stock objects, untouched. Switch on: patched only for the pinned sources."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest

from engine.patches.prefix_cache.hooks import ImportPatches, Installation
from engine.patches.prefix_cache.install import ENV_VAR, PATCHES, install
from engine.patches.prefix_cache.sources import EXPECTED_SOURCES
from tests.engine.prefix_cache.builders import prefix_cache_on, server_args

# (module, owner attribute or "" for the module itself, attribute) for everything we replace.
TARGETS = [
    ("sglang.srt.server_args", "ServerArgs", "_validate_glm5_next_session_ab_boundary"),
    ("sglang.srt.server_args", "ServerArgs", "mamba_cache_chunk_size"),
    ("sglang.srt.managers.scheduler", "Scheduler", "init_cache_with_memory_pool"),
    ("sglang.srt.managers.scheduler", "Scheduler", "init_deterministic_inference_config"),
    ("sglang.srt.managers.schedule_policy", "PrefillAdder", "add_chunked_req"),
    ("sglang.srt.managers.schedule_policy", "PrefillAdder", "add_one_req"),
    (
        "sglang.srt.managers.schedule_batch",
        "ScheduleBatch",
        "_mamba_radix_cache_v2_req_prepare_for_extend",
    ),
    ("sglang.srt.layers.attention.fla.kda", "", "chunk_gated_delta_rule_fwd_h"),
    ("sglang.srt.layers.attention.linear.glm5_next_kda_backend", "", "Glm5NextKDAAttnBackend"),
]


def _snapshot() -> list[Any]:
    out = []
    for module, owner, name in TARGETS:
        obj: Any = importlib.import_module(module)
        if owner:
            obj = getattr(obj, owner)
        out.append(vars(obj)[name])
    return out


def _finders() -> list[object]:
    return [f for f in sys.meta_path if isinstance(f, ImportPatches)]


def test_targets_cover_every_patched_module() -> None:
    assert {module for module, _, _ in TARGETS} == set(PATCHES)


def test_pinned_sources_are_the_wheel_under_test() -> None:
    from engine.patches.guard import sources_match

    assert sources_match(EXPECTED_SOURCES, patch="test")


@pytest.mark.parametrize("environ", [{}, {ENV_VAR: "0"}, {ENV_VAR: "off"}, {ENV_VAR: ""}])
def test_switch_off_leaves_every_stock_object_in_place(environ: dict[str, str]) -> None:
    before = _snapshot()
    installation = install(environ=environ)
    assert not installation.active
    assert installation.patcher.count == 0
    assert _finders() == []
    assert all(a is b for a, b in zip(before, _snapshot(), strict=True))


def test_switch_off_keeps_the_stock_validator_forcing_the_cache_off() -> None:
    args = server_args()
    args._validate_glm5_next_session_ab_boundary()
    assert args.disable_radix_cache is True
    assert args.mamba_cache_chunk_size == 64
    assert not hasattr(args, "_flashbox_prefix_cache_unit")


def test_switch_on_patches_everything_and_undo_restores_identity() -> None:
    before = _snapshot()
    with prefix_cache_on() as installation:
        during = _snapshot()
        assert installation.patcher.count == len(TARGETS)
        assert all(a is not b for a, b in zip(before, during, strict=True))
    assert all(a is b for a, b in zip(before, _snapshot(), strict=True))
    assert _finders() == []


def test_switch_on_with_different_sources_patches_nothing(caplog: pytest.LogCaptureFixture) -> None:
    before = _snapshot()
    wrong = {**EXPECTED_SOURCES, "sglang.srt.managers.scheduler": "0" * 64}
    installation = install(environ={ENV_VAR: "1"}, expected=wrong)
    try:
        assert installation.patcher.count == 0
        assert all(a is b for a, b in zip(before, _snapshot(), strict=True))
        assert "sglang.srt.managers.scheduler has sha256" in caplog.text
    finally:
        installation.undo()


def test_autoload_never_raises_and_reports_each_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    sys.modules.pop("engine.patches.autoload", None)
    autoload = importlib.import_module("engine.patches.autoload")
    results = autoload.install_all(("engine.patches.prefix_cache", "engine.patches.missing"))
    assert results["engine.patches.missing"] is None
    installation = results["engine.patches.prefix_cache"]
    assert isinstance(installation, Installation)
    assert not installation.active
