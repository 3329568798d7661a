"""Steps a and b of `python -m bench images-device`: prompt tokens per image size against the
gateway's formula, and the time an image adds before the first token.

Both come from one pass: per size and repeat, a text-only /generate and the same text with the
image, streamed, one new token each. Step a reads the first repeat's prompt tokens; step b the
TTFT medians. A probe (one small image after a short and after a long text, both on the hybrid
route an image request takes) gives the hybrid prefill rate, which turns the extra time of a
larger image into its vision + preprocessing time (figures for the simulator's `images:`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import httpx

from bench.images_engine import (
    PROBE_SIZE,
    EngineInfo,
    Generation,
    ProbeError,
    PromptBuilder,
    count_tokens,
    generate,
    question,
    solid_png,
)
from gateway.core.run import extra_tokens
from gateway.media import CheckedImage
from gateway.media.tokens import FACTOR, image_tokens, prompt_tokens, smart_resize

SIZE_COLOUR = (40, 90, 160)
PATCHES_PER_TOKEN = 4  # 2x2 patches of 14x14 merge into one token (MEDIA.md 2.3)


@dataclass
class SizeRow:
    width: int
    height: int
    resized_width: int
    resized_height: int
    expected_tokens: int  # the gateway's formula: <|image|> tokens, markers not included
    over_max_pixels: bool  # the resize rule scaled the image down
    measured_tokens: int | None = None
    engine_prompt_tokens: int | None = None
    # What the gateway counts for this prompt before sending it: /tokenize of the text with
    # the marker plus the image's extra tokens (gateway/core/run.py extra_tokens).
    gateway_estimate: int | None = None
    ttft_text_s: list[float] = field(default_factory=list)
    ttft_image_s: list[float] = field(default_factory=list)
    cached_tokens: int = 0
    error: str | None = None

    @property
    def label(self) -> str:
        return f"{self.width}x{self.height}"

    @property
    def patches(self) -> int:
        return self.expected_tokens * PATCHES_PER_TOKEN

    @property
    def megapixels(self) -> float:
        return self.width * self.height / 1e6


@dataclass
class Probe:
    """The 224x224 image after a short and after a long question."""

    short_ttft_s: list[float] = field(default_factory=list)
    long_ttft_s: list[float] = field(default_factory=list)
    short_prompt_tokens: int = 0
    long_prompt_tokens: int = 0
    cached_tokens: int = 0
    error: str | None = None


def new_row(width: int, height: int, max_pixels: int) -> SizeRow:
    resized_height, resized_width = smart_resize(height, width, max_pixels=max_pixels)
    # Without the cap, the sides are only rounded to multiples of 28.
    rounded = round(height / FACTOR) * FACTOR * round(width / FACTOR) * FACTOR
    return SizeRow(
        width=width,
        height=height,
        resized_width=resized_width,
        resized_height=resized_height,
        expected_tokens=image_tokens(width, height, max_pixels=max_pixels),
        over_max_pixels=resized_height * resized_width < rounded,
    )


def _gateway_estimate(
    client: httpx.Client, engine: str, prompt: str, row: SizeRow, max_pixels: int
) -> int:
    image = CheckedImage(
        data_url="",
        digest="",
        width=row.width,
        height=row.height,
        format="png",
        size=0,
        tokens=prompt_tokens(row.width, row.height, max_pixels=max_pixels),
    )
    return count_tokens(client, engine, prompt) + extra_tokens([image])


def measure_sizes(
    client: httpx.Client,
    engine: str,
    builder: PromptBuilder,
    info: EngineInfo,
    sizes: list[tuple[int, int]],
    repeats: int,
) -> list[SizeRow]:
    rows = [new_row(width, height, info.max_pixels) for width, height in sizes]
    for row in rows:
        try:
            for repeat in range(repeats):
                prompt = builder.image_prompt(question())
                text = builder.without_image(prompt)
                image = solid_png(row.width, row.height, SIZE_COLOUR, unique=True)
                # Interleaved, so drift over the run touches both sides alike.
                plain = generate(client, engine, text)
                shown = generate(client, engine, prompt, [image])
                row.ttft_text_s.append(plain.ttft_s)
                row.ttft_image_s.append(shown.ttft_s)
                row.cached_tokens = max(row.cached_tokens, plain.cached_tokens, shown.cached_tokens)
                if repeat == 0:
                    row.measured_tokens = shown.prompt_tokens - plain.prompt_tokens
                    row.engine_prompt_tokens = shown.prompt_tokens
                    row.gateway_estimate = _gateway_estimate(
                        client, engine, prompt, row, info.max_pixels
                    )
        except (ProbeError, httpx.HTTPError) as exc:
            row.error = f"{type(exc).__name__}: {exc}"
    return rows


def probe_hybrid(
    client: httpx.Client, engine: str, builder: PromptBuilder, repeats: int, filler_words: int
) -> Probe:
    probe = Probe()
    width, height = PROBE_SIZE
    try:
        for _ in range(repeats):
            # Each request its own pixels (a vision-cache hit would skip the tower).
            short_image = solid_png(width, height, SIZE_COLOUR, unique=True)
            long_image = solid_png(width, height, SIZE_COLOUR, unique=True)
            short = generate(client, engine, builder.image_prompt(question()), [short_image])
            long = generate(
                client,
                engine,
                builder.image_prompt(question(filler_words=filler_words)),
                [long_image],
            )
            probe.short_ttft_s.append(short.ttft_s)
            probe.long_ttft_s.append(long.ttft_s)
            probe.short_prompt_tokens = short.prompt_tokens
            probe.long_prompt_tokens = long.prompt_tokens
            probe.cached_tokens = max(probe.cached_tokens, short.cached_tokens, long.cached_tokens)
    except (ProbeError, httpx.HTTPError) as exc:
        probe.error = f"{type(exc).__name__}: {exc}"
    return probe


def warm_up(client: httpx.Client, engine: str, builder: PromptBuilder) -> Generation:
    """One image request first: the engine's first vision pass may build kernels or graphs."""
    width, height = PROBE_SIZE
    image = solid_png(width, height, SIZE_COLOUR, unique=True)
    return generate(client, engine, builder.image_prompt(question()), [image])


def row_ok(row: SizeRow, info: EngineInfo) -> bool:
    """Step a for one size: measured as the formula says; on a real engine, the gateway's
    estimate of the whole prompt also equals the engine's count (the simulator's tokenizer
    spells the markers as byte chunks, not one token each, so it cannot check that part)."""
    if row.error is not None or row.measured_tokens != row.expected_tokens:
        return False
    return info.simulator or row.gateway_estimate == row.engine_prompt_tokens


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
