"""The model's image rules: how big an image becomes in the prompt, and how its tokens are keyed.

Size (../shared/docs/MEDIA.md 2.3): transformers' GLM-4.6V `smart_resize` with factor 28 (patch 14
x merge 2) over two frames (an image is padded to temporal_patch_size 2), so the pixel budget
`max_pixels` holds max_pixels / 2 pixels of the image; the image becomes H'·W' / 784 tokens.

Keys (MEDIA.md 3.5): the scheduler replaces every image token by its multimodal item's pad
value, 1,000,000 + a hash of the processed pixels modulo 2^30. This model's adapter bundles all
of a request's images into one item, so one pad value covers all of them: a later turn that adds
an image changes the key of every earlier image's tokens. With SGLANG_ENABLE_MM_SPLITTING each
image is its own item (`splitting`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.sim.profile import MIN_PIXELS
from engine.sim.tokens import TokenSeq, from_ids

FACTOR = 28  # patch 14 x spatial merge 2
TEMPORAL_PATCH = 2  # an image is two identical frames
TOKEN_PIXELS = FACTOR * FACTOR  # one image token per 28x28 of the resized image
PATCHES_PER_TOKEN = 4  # 2x2 patches of 14x14 merge into one token
MAX_ASPECT_RATIO = 200
PAD_BASE = 1_000_000
PAD_MODULUS = 2**30


def smart_resize(
    height: int, width: int, max_pixels: int, min_pixels: int = MIN_PIXELS
) -> tuple[int, int]:
    """The resized (height, width), as transformers' glm46v `smart_resize` with
    num_frames = temporal_factor = 2; an aspect ratio over 200 is its ValueError."""
    if height < FACTOR or width < FACTOR:
        scale = max(FACTOR / height, FACTOR / width)
        height = int(height * scale)
        width = int(width * scale)
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {ratio}")
    frames = TEMPORAL_PATCH
    h_bar = round(height / FACTOR) * FACTOR
    w_bar = round(width / FACTOR) * FACTOR
    t_bar = round(frames / TEMPORAL_PATCH) * TEMPORAL_PATCH
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((frames * height * width) / max_pixels)
        h_bar = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w_bar = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar = math.ceil(height * beta / FACTOR) * FACTOR
        w_bar = math.ceil(width * beta / FACTOR) * FACTOR
    return h_bar, w_bar


@dataclass(frozen=True)
class ImageSize:
    """One image of a request: its source and resized sizes and its pixels' digest."""

    width: int
    height: int
    resized_width: int
    resized_height: int
    digest: bytes

    @property
    def tokens(self) -> int:
        return self.resized_width * self.resized_height // TOKEN_PIXELS

    @property
    def patches(self) -> int:
        return self.tokens * PATCHES_PER_TOKEN

    @property
    def megapixels(self) -> float:
        return self.width * self.height / 1e6


def size_image(width: int, height: int, digest: bytes, max_pixels: int) -> ImageSize:
    resized_height, resized_width = smart_resize(height, width, max_pixels)
    return ImageSize(width, height, resized_width, resized_height, digest)


def image_tokens(width: int, height: int, max_pixels: int) -> int:
    """Image tokens of a width x height image (its two markers not included)."""
    return size_image(width, height, b"", max_pixels).tokens


def pad_values(images: Sequence[ImageSize], max_pixels: int, splitting: bool) -> list[int]:
    """Each image's pad value: one hash over all of them (the bundle), or one each."""

    def pad(digests: Sequence[bytes]) -> int:
        hasher = hashlib.blake2b(str(max_pixels).encode(), digest_size=8)
        for digest in digests:
            hasher.update(digest)
        return PAD_BASE + int.from_bytes(hasher.digest(), "little") % PAD_MODULUS

    if splitting:
        return [pad([image.digest]) for image in images]
    bundle = pad([image.digest for image in images])
    return [bundle] * len(images)


@dataclass(frozen=True)
class ExpandedPrompt:
    """A prompt with each image placeholder replaced by its image tokens."""

    seq: TokenSeq
    # Each image's tokens: [start, end) token positions in seq.
    runs: tuple[tuple[int, int], ...]

    @property
    def images_end(self) -> int:
        """Where the last image's tokens end (0 without images)."""
        return self.runs[-1][1] if self.runs else 0


def _pad_token(value: int, unit: int) -> bytes:
    word = value.to_bytes(4, "little")
    return (word * -(-unit // 4))[:unit]


def expand_text(
    text: str, placeholder: str, counts: Sequence[int], pads: Sequence[int], unit: int
) -> ExpandedPrompt:
    """The text's bytes with each placeholder replaced by its image's pad tokens.

    An image's tokens start on a token boundary (the text before it is zero-padded to one), so
    they are whole tokens; text before the first image keys as the same text without images.
    """
    parts = text.split(placeholder)
    if len(parts) != len(counts) + 1:
        raise ValueError("one placeholder per image is required")
    data = bytearray()
    runs: list[tuple[int, int]] = []
    for index, part in enumerate(parts):
        data += part.encode()
        if index == len(counts):
            break
        data += b"\0" * (-len(data) % unit)
        start = len(data) // unit
        data += _pad_token(pads[index], unit) * counts[index]
        runs.append((start, start + counts[index]))
    return ExpandedPrompt(TokenSeq(bytes(data), unit), tuple(runs))


def expand_ids(
    ids: Sequence[int], placeholder_id: int, counts: Sequence[int], pads: Sequence[int]
) -> ExpandedPrompt:
    """input_ids with each placeholder id replaced by its image's pad ids."""
    out: list[int] = []
    runs: list[tuple[int, int]] = []
    for token in ids:
        if token != placeholder_id:
            out.append(token)
            continue
        index = len(runs)
        runs.append((len(out), len(out) + counts[index]))
        out.extend([pads[index]] * counts[index])
    if len(runs) != len(counts):
        raise ValueError("one placeholder per image is required")
    return ExpandedPrompt(from_ids(out), tuple(runs))
