"""The engine's image bounds, as sglang-kt 0.7.2 takes them on its command line.

The bounds mirror the wheel's GLM-5.3-Flash image processor (multimodal/processors/glm5_next.py):
it accepts `max_pixels` only within [12,544, 6,272,000] (6,272,000 = 8000 * 14^2 * 2^2 is also its
default) and at most 8 images per request, whatever the flags say. The gateway reads the same
profile values, so its limits and token estimates agree with the engine.
"""

from __future__ import annotations

import json

ENGINE_MIN_PIXELS = 12_544
ENGINE_MAX_PIXELS = 6_272_000
ENGINE_MAX_IMAGES = 8
# KTransformers' documented setting: at most 800 tokens per image.
KT_DOC_MAX_PIXELS = 1_254_400
# The resize budget covers two frames (an image is padded to the temporal patch of 2) and one
# token is a 28x28 patch, so an image costs at most max_pixels / (2 * 28 * 28) tokens.
PIXELS_PER_TOKEN_BUDGET = 2 * 28 * 28


def max_tokens_per_image(max_pixels: int) -> int:
    """Placeholder tokens one image expands to at most (two more for its begin/end markers)."""
    return max_pixels // PIXELS_PER_TOKEN_BUDGET


def process_config(max_pixels: int) -> str:
    """`--mm-process-config`: the processor raises on any key besides image.max_pixels."""
    return json.dumps({"image": {"max_pixels": max_pixels}})


def limit_per_request(max_images: int) -> str:
    """`--limit-mm-data-per-request`: checked by the tokenizer manager before the processor."""
    return json.dumps({"image": max_images})
