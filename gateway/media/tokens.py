"""The engine's prompt-token count for an image, from its size alone.

sglang-kt 0.7.2 resizes each image with GLM-4.6V's smart_resize (transformers-kt
models/glm46v/image_processing_glm46v.py) before the vision tower: sides become multiples of
28 (patch 14 x merge 2), and the pixel budget is compared against *two* frames, because an
image is padded to temporal_patch_size 2. Each 28x28 cell is one <|image|> token, and the
template's <|begin_of_image|> / <|end_of_image|> add two more (../shared/docs/MEDIA.md 2.3).
This is a line-for-line port (Python's round() included) so the estimate equals the engine's.
"""

from __future__ import annotations

import math

FACTOR = 28  # patch_size 14 x spatial merge 2
TEMPORAL_FACTOR = 2  # an image is duplicated to temporal_patch_size frames
# The engine overwrites the image processor's size to {shortest_edge: 12,544, longest_edge:
# max_pixels}; 12,544 is fixed, only max_pixels is configurable (--mm-process-config).
ENGINE_MIN_PIXELS = 12_544
ENGINE_MAX_ASPECT_RATIO = 200
MARKER_TOKENS = 2  # <|begin_of_image|> and <|end_of_image|>


class AspectRatioError(ValueError):
    """The engine's smart_resize would raise: the image is too long and thin."""


def smart_resize(
    height: int,
    width: int,
    *,
    max_pixels: int,
    min_pixels: int = ENGINE_MIN_PIXELS,
    num_frames: int = TEMPORAL_FACTOR,
    temporal_factor: int = TEMPORAL_FACTOR,
    factor: int = FACTOR,
) -> tuple[int, int]:
    """(resized height, resized width), as the engine computes them."""
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height = int(height * scale)
        width = int(width * scale)
    if max(height, width) / min(height, width) > ENGINE_MAX_ASPECT_RATIO:
        raise AspectRatioError(
            f"absolute aspect ratio must be smaller than {ENGINE_MAX_ASPECT_RATIO}, "
            f"got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def image_tokens(width: int, height: int, *, max_pixels: int) -> int:
    """<|image|> tokens the engine expands one image into (markers not included)."""
    resized_height, resized_width = smart_resize(height, width, max_pixels=max_pixels)
    return resized_height * resized_width // (FACTOR * FACTOR)


def prompt_tokens(width: int, height: int, *, max_pixels: int) -> int:
    """Prompt tokens one image costs: its image tokens plus the two markers."""
    return image_tokens(width, height, max_pixels=max_pixels) + MARKER_TOKENS
