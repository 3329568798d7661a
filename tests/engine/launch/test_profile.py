"""Profile validation, the prefix-cache gate and the pool arithmetic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.launch.host import HostFacts
from engine.launch.plan import build_plan
from engine.launch.prefix_cache import (
    AVAILABLE_ENV,
    PATCH_MODULE,
    change_available,
    pool_mib,
    running_cap,
)
from engine.launch.profile import EngineProfile, ProfileError, load_profile
from engine.launch.render import REDACTED, render_plan
from tests.support.procs import REPO_ROOT

REFERENCE_PROFILE = REPO_ROOT / "config" / "engine" / "rtx-pro-6000-epyc.yaml"


def _reference_data() -> dict[str, Any]:
    data = yaml.safe_load(REFERENCE_PROFILE.read_text())
    assert isinstance(data, dict)
    return data


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "config" / "engine").glob("*.yaml")))
def test_committed_profiles_load(path: Path) -> None:
    assert load_profile(path).name == path.stem


def test_errors_name_the_field(tmp_path: Path) -> None:
    data = _reference_data()
    data["gpu"]["mem_fraction_static"] = 1.5
    data["kt"]["bogus"] = 1
    with pytest.raises(ProfileError) as err:
        load_profile(_write(tmp_path, data))
    assert "gpu.mem_fraction_static" in str(err.value)
    assert "kt.bogus" in str(err.value)
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "missing.yaml")


def test_prefix_cache_requires_256_aligned_chunks(tmp_path: Path) -> None:
    data = _reference_data()
    data["scheduling"]["chunked_prefill_size"] = 2000
    with pytest.raises(ProfileError, match="multiple of 256"):
        load_profile(_write(tmp_path, data))
    data["prefix_cache"] = False  # the bool shorthand turns it off, and the check with it
    assert not load_profile(_write(tmp_path, data)).prefix_cache.enabled


def test_availability_switch() -> None:
    assert change_available({}, finder=lambda name: name == PATCH_MODULE)
    assert not change_available({}, finder=lambda _name: False)
    assert change_available({AVAILABLE_ENV: "1"}, finder=lambda _name: False)
    assert not change_available({AVAILABLE_ENV: "0"}, finder=lambda _name: True)


def test_pool_arithmetic() -> None:
    assert running_cap(192) == 38
    assert pool_mib(192, 140.0, 1) == 26880.0
    assert pool_mib(192, 140.0, 2) == 13440.0


def test_auto_slots_without_a_gpu_is_a_problem() -> None:
    data = _reference_data()
    data["prefix_cache"]["slots"] = "auto"
    plan = build_plan(
        EngineProfile.model_validate(data),
        HostFacts(),
        python="python3",
        environ={},
        prefix_cache_available=True,
    )
    assert any("no NVIDIA GPU" in p for p in plan.problems)
    assert any("slots is auto" in p for p in plan.problems)
    assert "--max-mamba-cache-size" not in plan.argv


def test_api_key_comes_from_the_environment_and_is_redacted() -> None:
    data = _reference_data()
    data["server"]["api_key_env"] = "ENGINE_KEY"
    profile = EngineProfile.model_validate(data)
    plan = build_plan(
        profile,
        HostFacts(),
        python="python3",
        environ={"ENGINE_KEY": "s3cret"},
        prefix_cache_available=False,
    )
    assert plan.argv[plan.argv.index("--api-key") + 1] == "s3cret"
    text = render_plan(plan, profile_name=profile.name, host=HostFacts())
    assert "s3cret" not in text
    assert REDACTED in text
