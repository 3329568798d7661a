"""The engine's image token count (smart_resize), against MEDIA.md 2.3's table."""

from __future__ import annotations

import pytest

from gateway.media.tokens import AspectRatioError, image_tokens, prompt_tokens, smart_resize

DEFAULT = 6_272_000  # the engine's default max_pixels
KT = 1_254_400  # KT-doc's --mm-process-config value, the appliance default

# (width, height) -> ((resized W, resized H, tokens) at DEFAULT, (...) at KT)
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


@pytest.mark.parametrize(("size", "default", "kt"), TABLE)
def test_media_table(
    size: tuple[int, int], default: tuple[int, int, int], kt: tuple[int, int, int]
) -> None:
    width, height = size
    for max_pixels, (resized_w, resized_h, tokens) in ((DEFAULT, default), (KT, kt)):
        assert smart_resize(height, width, max_pixels=max_pixels) == (resized_h, resized_w)
        assert image_tokens(width, height, max_pixels=max_pixels) == tokens
        assert prompt_tokens(width, height, max_pixels=max_pixels) == tokens + 2


def test_the_cap_counts_two_frames() -> None:
    # max_pixels is compared against 2 frames: the real cap is max_pixels / 1568 tokens.
    for max_pixels in (DEFAULT, KT):
        for width, height in ((9000, 9000), (4000, 3000), (20000, 200)):
            assert image_tokens(width, height, max_pixels=max_pixels) <= max_pixels // 1568


def test_orientation_does_not_change_tokens() -> None:
    for width, height in ((1920, 1080), (8000, 100), (31, 900)):
        assert image_tokens(width, height, max_pixels=KT) == image_tokens(
            height, width, max_pixels=KT
        )


def test_aspect_ratio_over_200_raises_like_the_engine() -> None:
    assert image_tokens(200 * 28, 28, max_pixels=DEFAULT) > 0
    with pytest.raises(AspectRatioError):
        image_tokens(201 * 28, 28, max_pixels=DEFAULT)
    # Tiny sides are scaled up to 28 first, then checked (the engine's order).
    with pytest.raises(AspectRatioError):
        image_tokens(3000, 10, max_pixels=DEFAULT)
