"""The model's image rules (engine/sim/images.py): sizes against MEDIA.md's table, pad keys,
prompt expansion; the profile's images section and the engine's image flags."""

from __future__ import annotations

from typing import Any

import pytest

from engine.sim.__main__ import settings_from_args
from engine.sim.images import (
    expand_ids,
    expand_text,
    image_tokens,
    pad_values,
    size_image,
    smart_resize,
)
from engine.sim.profile import (
    ProfileError,
    load_profile,
    parse_mm_limits,
    parse_mm_process_config,
)
from engine.sim.tokens import from_text, prefix_key

DEFAULT = 6_272_000
KT = 1_254_400

# ../shared/docs/MEDIA.md 2.3, copied on purpose: input W x H, then resized W' x H' and tokens at
# the engine's default max_pixels and at KT's tutorial value.
TABLE = [
    ((28, 28), (84, 84, 9), (84, 84, 9)),
    ((224, 224), (224, 224, 64), (224, 224, 64)),
    ((512, 512), (504, 504, 324), (504, 504, 324)),
    ((640, 480), (644, 476, 391), (644, 476, 391)),
    ((1024, 768), (1036, 756, 999), (896, 672, 768)),
    ((1280, 720), (1288, 728, 1196), (1036, 588, 777)),
    ((1920, 1080), (1932, 1092, 2691), (1036, 588, 777)),
    ((2048, 1536), (2044, 1512, 3942), (896, 672, 768)),
    ((3840, 2160), (2352, 1316, 3948), (1036, 588, 777)),
    ((4032, 3024), (2044, 1512, 3942), (896, 672, 768)),
    ((8000, 100), (8008, 112, 1144), (7056, 84, 756)),
]


@pytest.mark.parametrize(
    ("source", "default", "kt"), TABLE, ids=[f"{w}x{h}" for (w, h), *_ in TABLE]
)
def test_sizes_follow_the_table(
    source: tuple[int, int], default: tuple[int, int, int], kt: tuple[int, int, int]
) -> None:
    width, height = source
    for max_pixels, (rw, rh, tokens) in ((DEFAULT, default), (KT, kt)):
        assert smart_resize(height, width, max_pixels) == (rh, rw)
        assert image_tokens(width, height, max_pixels) == tokens


@pytest.mark.parametrize("max_pixels", [DEFAULT, KT, 200_704])
def test_the_cap_is_max_pixels_over_1568(max_pixels: int) -> None:
    # The budget counts two frames: at most max_pixels / 1568 tokens, whatever the image.
    for width, height in ((4032, 3024), (10000, 9000), (7000, 100), (3000, 3000)):
        assert image_tokens(width, height, max_pixels) <= max_pixels // 1568


def test_aspect_ratio_over_200_is_the_engines_value_error() -> None:
    assert image_tokens(5600, 28, DEFAULT) > 0  # exactly 200
    with pytest.raises(ValueError, match="absolute aspect ratio must be smaller than 200, got"):
        smart_resize(10, 3000, DEFAULT)  # 300:1


def test_one_pad_per_request_unless_split() -> None:
    a = size_image(64, 64, b"a" * 16, DEFAULT)
    b = size_image(64, 64, b"b" * 16, DEFAULT)
    bundle_a = pad_values([a], DEFAULT, splitting=False)
    bundle_ab = pad_values([a, b], DEFAULT, splitting=False)
    assert bundle_ab[0] == bundle_ab[1]
    assert bundle_a[0] != bundle_ab[0]  # adding B changes A's key
    split = pad_values([a, b], DEFAULT, splitting=True)
    assert split[0] == pad_values([a], DEFAULT, splitting=True)[0] != split[1]
    # The processed pixels depend on max_pixels; so does the key.
    assert pad_values([a], KT, splitting=False) != bundle_a
    assert all(1_000_000 <= value < 1_000_000 + 2**30 for value in bundle_ab + split)


def test_text_expansion_keeps_text_keys_and_aligns_images() -> None:
    text = "abcdefg<|image|>tail"
    expanded = expand_text(text, "<|image|>", [9], [1_234_567], unit=4)
    # "abcdefg" padded to 8 bytes = 2 tokens, then 9 image tokens, then "tail".
    assert expanded.runs == ((2, 11),)
    assert expanded.images_end == 11
    assert expanded.seq.count == 2 + 9 + 1
    # Text before the image keys as the same text without images.
    assert prefix_key(expanded.seq, 1) == prefix_key(from_text("abcdefg", 4), 1)
    two = expand_text("x<|image|>y<|image|>", "<|image|>", [3, 4], [1, 2], unit=4)
    assert two.runs == ((1, 4), (5, 9))
    with pytest.raises(ValueError, match="one placeholder per image"):
        expand_text(text, "<|image|>", [1, 2], [1, 2], unit=4)


def test_ids_expansion() -> None:
    expanded = expand_ids([5, 154854, 6, 154854], 154854, [2, 3], [7, 8])
    assert expanded.runs == ((1, 3), (4, 7))
    assert expanded.seq.count == 7


def test_the_shipped_profile_models_the_engine_defaults() -> None:
    images = load_profile().images
    assert images is not None
    assert images.max_pixels == DEFAULT
    assert images.max_pixels_flag is None
    assert images.max_images_per_request == 8
    assert images.limit_mm_data_per_request is None
    assert not images.mm_splitting
    assert images.hybrid_tokens_per_second == 130


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (None, None),
        ({}, None),
        ({"image": {}}, None),
        ({"image": {"max_pixels": KT}}, KT),
        ({"image": {"max_pixels": 12_544}}, 12_544),
    ],
)
def test_mm_process_config_accepted(config: Any, expected: int | None) -> None:
    assert parse_mm_process_config(config) == expected


@pytest.mark.parametrize(
    "config",
    [
        {"video": {"fps": 1}},
        {"image": {"max_pixels": 7_000_000}},
        {"image": {"max_pixels": 100}},
        {"image": {"max_pixels": "big"}},
        {"image": {"min_pixels": 1}},
        [1],
    ],
)
def test_mm_process_config_refused_as_the_adapter_refuses(config: Any) -> None:
    with pytest.raises(ProfileError):
        parse_mm_process_config(config)


def test_mm_limits() -> None:
    assert parse_mm_limits({"image": 4, "video": 1}) == {"image": 4, "video": 1}
    assert parse_mm_limits(None) is None
    with pytest.raises(ProfileError, match="invalid modality"):
        parse_mm_limits({"pictures": 2})


def test_engine_flags_override_the_profile() -> None:
    settings = settings_from_args(
        [
            "--mm-process-config",
            '{"image": {"max_pixels": 1254400}}',
            "--limit-mm-data-per-request",
            '{"image": 4}',
        ]
    )
    images = settings.profile.images
    assert images is not None
    assert images.max_pixels == KT
    assert images.limit_mm_data_per_request == {"image": 4}
    with pytest.raises(SystemExit):
        settings_from_args(["--mm-process-config", '{"image": {"max_pixels": 1}}'])
