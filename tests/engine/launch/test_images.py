"""The profile's image bounds: defaults, refusals, and the engine flags they become."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.launch import images
from engine.launch.host import probe
from engine.launch.plan import LaunchPlan, build_plan
from engine.launch.profile import EngineProfile, ImagesSection, ProfileError, load_profile
from engine.launch.render import render_plan
from tests.engine.fixtures.hosts import REFERENCE, SMALLER_GPU, host_sources
from tests.support.procs import REPO_ROOT
from tests.support.sglang_wheel import sglang_kt_root

PROFILES = REPO_ROOT / "config" / "engine"
REFERENCE_PROFILE = PROFILES / "rtx-pro-6000-epyc.yaml"


def _reference_data() -> dict[str, Any]:
    data = yaml.safe_load(REFERENCE_PROFILE.read_text())
    assert isinstance(data, dict)
    return data


def _load(tmp_path: Path, data: dict[str, Any]) -> EngineProfile:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_profile(path)


def _images(profile: EngineProfile) -> ImagesSection:
    assert profile.images is not None
    return profile.images


def _plan(profile: EngineProfile, tmp_path: Path, host: str = REFERENCE) -> LaunchPlan:
    return build_plan(
        profile,
        probe(host_sources(host, tmp_path / "host")),
        python="python3",
        environ={},
        prefix_cache_available=True,
    )


def _value(plan: LaunchPlan, flag: str) -> Any:
    argv = list(plan.argv)
    assert argv.count(flag) == 1, flag
    return json.loads(argv[argv.index(flag) + 1])


def test_defaults_are_the_engines_own() -> None:
    bounds = ImagesSection()
    assert bounds.max_pixels == 6_272_000
    assert bounds.max_images_per_request == 8
    assert bounds.max_tokens_per_image == 4_000
    assert images.max_tokens_per_image(images.KT_DOC_MAX_PIXELS) == 800


def test_a_profile_without_the_section_gets_the_defaults(tmp_path: Path) -> None:
    data = _reference_data()
    del data["images"]
    profile = _load(tmp_path, data)
    assert profile.images == ImagesSection()
    plan = _plan(profile, tmp_path)
    assert _value(plan, "--mm-process-config") == {"image": {"max_pixels": 6_272_000}}
    assert _value(plan, "--limit-mm-data-per-request") == {"image": 8}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_pixels", 6_272_001),
        ("max_pixels", 12_543),
        ("max_pixels", "1254400"),
        ("max_pixels", 1_254_400.5),
        ("max_images_per_request", 9),
        ("max_images_per_request", 0),
        ("max_images_per_request", True),
    ],
)
def test_bounds_the_engine_would_refuse_are_refused(
    tmp_path: Path, field: str, value: object
) -> None:
    data = _reference_data()
    data["images"][field] = value
    with pytest.raises(ProfileError, match=rf"images\.{field}"):
        _load(tmp_path, data)


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    # The engine's processor takes image.max_pixels only; min_pixels or video settings raise.
    data = _reference_data()
    data["images"]["min_pixels"] = 12_544
    with pytest.raises(ProfileError, match=r"images\.min_pixels"):
        _load(tmp_path, data)


def test_the_extremes_are_accepted(tmp_path: Path) -> None:
    data = _reference_data()
    data["images"] = {"max_pixels": 12_544, "max_images_per_request": 1}
    assert _images(_load(tmp_path, data)).max_tokens_per_image == 8
    data["images"] = {"max_pixels": 6_272_000, "max_images_per_request": 8}
    assert _images(_load(tmp_path, data)).max_tokens_per_image == 4_000


def test_profile_values_become_the_engine_flags(tmp_path: Path) -> None:
    data = _reference_data()
    data["images"] = {"max_pixels": 802_816, "max_images_per_request": 3}
    plan = _plan(_load(tmp_path, data), tmp_path)
    assert _value(plan, "--mm-process-config") == {"image": {"max_pixels": 802_816}}
    assert _value(plan, "--limit-mm-data-per-request") == {"image": 3}
    text = render_plan(plan, profile_name="p", host=probe(host_sources(REFERENCE, tmp_path)))
    # The dry run is a shell command: each JSON value is one quoted word.
    assert '  --mm-process-config \'{"image": {"max_pixels": 802816}}\' \\\n' in text
    assert "  --limit-mm-data-per-request '{\"image\": 3}' \\\n" in text


@pytest.mark.parametrize(
    ("profile_name", "host", "max_images"),
    [("rtx-pro-6000-epyc", REFERENCE, 8), ("rtx-5090-epyc", SMALLER_GPU, 4)],
)
def test_committed_profiles_cap_an_image_at_800_tokens(
    tmp_path: Path, profile_name: str, host: str, max_images: int
) -> None:
    profile = load_profile(PROFILES / f"{profile_name}.yaml")
    assert _images(profile).max_pixels == images.KT_DOC_MAX_PIXELS
    assert _images(profile).max_tokens_per_image == 800
    plan = _plan(profile, tmp_path, host)
    assert _value(plan, "--mm-process-config") == {"image": {"max_pixels": 1_254_400}}
    assert _value(plan, "--limit-mm-data-per-request") == {"image": max_images}


def _module_constants(source: str) -> dict[str, int]:
    """Top-level integer constants, including products and powers of earlier ones."""
    values: dict[str, int] = {}

    def value(node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return value(node.left) * value(node.right)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return int(value(node.left) ** value(node.right))
        raise ValueError(ast.dump(node))

    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name) and target.id.startswith("GLM5_NEXT_"):
                values[target.id] = value(statement.value)
    return values


def test_bounds_match_the_pinned_engine() -> None:
    """The wheel's own limits, read from its GLM-5.3-Flash image processor."""
    processor = sglang_kt_root() / "sglang/srt/multimodal/processors/glm5_next.py"
    source = processor.read_text(encoding="utf-8")
    constants = _module_constants(source)
    assert constants["GLM5_NEXT_MIN_PIXELS"] == images.ENGINE_MIN_PIXELS
    assert constants["GLM5_NEXT_DEFAULT_MAX_PIXELS"] == images.ENGINE_MAX_PIXELS
    assert constants["GLM5_NEXT_CHECKPOINT_MAX_PIXELS"] == images.ENGINE_MAX_PIXELS
    assert f"at most {images.ENGINE_MAX_IMAGES} images per request" in source
