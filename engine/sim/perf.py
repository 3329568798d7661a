"""The performance model: what a prefill and a decode step cost on the reference hardware.

All figures are seconds on the calibrated host (time scale 1.0); the scheduler multiplies
them by --time-scale when it sleeps. docs/simulator.md derives each rule from FACTS.md.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from engine.sim.images import ImageSize
from engine.sim.profile import ImageProfile, Profile


def interpolate(table: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through the table; beyond the ends, the nearest segment's slope."""
    if len(table) == 1:
        return table[0][1]
    xs = [p[0] for p in table]
    i = bisect_left(xs, x)
    if i <= 0:
        (x0, y0), (x1, y1) = table[0], table[1]
    elif i >= len(table):
        (x0, y0), (x1, y1) = table[-2], table[-1]
    else:
        (x0, y0), (x1, y1) = table[i - 1], table[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


# A cold-table row this close to the floor is floor-bound (PCIe expert streaming), not compute.
FLOOR_BOUND = 0.10


class PerfModel:
    """Prefill seconds by (prompt, cached) tokens; decode step seconds by (context, batch)."""

    def __init__(self, profile: Profile) -> None:
        self._profile = profile
        # Compute work of the first n tokens: the cold table through the origin, leaving out
        # rows within FLOOR_BOUND of the floor (those only say "compute fits under the floor").
        floor = profile.prefill_floor_seconds
        compute_rows = tuple(
            row for row in profile.prefill_cold_seconds if row[1] > floor * (1 + FLOOR_BOUND)
        )
        self._cumulative = ((0.0, 0.0), *compute_rows)
        bs1 = interpolate(profile.decode_tps_by_batch, 1.0)
        # Step time relative to bs1: (b / aggregate tok/s at b) / (1 / tok/s at bs1).
        self._batch_points = tuple((b, (b / tps) * bs1) for b, tps in profile.decode_tps_by_batch)

    def _work_up_to(self, tokens: float) -> float:
        # Clamp at 0: the extrapolated slope below the first row must not go negative.
        return max(0.0, interpolate(self._cumulative, tokens))

    def prefill_seconds(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        """max(floor, compute of the uncached tokens), plus a restore when a checkpoint hit."""
        cached = max(0, min(cached_tokens, prompt_tokens))
        marginal = self._work_up_to(prompt_tokens) - self._work_up_to(cached)
        seconds = max(self._profile.prefill_floor_seconds, marginal)
        if cached > 0:
            seconds += self._profile.checkpoint_restore_seconds
        return seconds

    def prefill_batch_seconds(
        self, requests: Sequence[tuple[int, int]], *, hybrid: bool = False
    ) -> float:
        """Prompts prefilled in one forward share the floor; each restored checkpoint costs.

        `hybrid`: the batch holds an image request, so all of it takes the CPU-expert hybrid
        route (uncalibrated rate, no layer-wise table) instead of the layer-wise one."""
        if hybrid:
            images = self._images()
            uncached = sum(prompt - max(0, min(cached, prompt)) for prompt, cached in requests)
            floor = images.hybrid_floor_seconds
            marginal = uncached / images.hybrid_tokens_per_second
        else:
            floor = self._profile.prefill_floor_seconds
            marginal = sum(
                self._work_up_to(prompt) - self._work_up_to(max(0, min(cached, prompt)))
                for prompt, cached in requests
            )
        restores = sum(1 for prompt, cached in requests if min(cached, prompt) > 0)
        return max(floor, marginal) + restores * self._profile.checkpoint_restore_seconds

    def split_prefill_extra_seconds(
        self, prompt_tokens: int, cached_tokens: int, cut: int, *, hybrid: bool = False
    ) -> float:
        """What cutting one prompt's prefill at `cut` adds: two forwards, each with its floor,
        instead of one (the patched engine cuts at a prompt head to save its state)."""
        cached = max(0, min(cached_tokens, cut))
        cut = min(cut, prompt_tokens)
        if hybrid:
            images = self._images()
            floor = images.hybrid_floor_seconds
            before = (cut - cached) / images.hybrid_tokens_per_second
            after = (prompt_tokens - cut) / images.hybrid_tokens_per_second
        else:
            floor = self._profile.prefill_floor_seconds
            before = self._work_up_to(cut) - self._work_up_to(cached)
            after = self._work_up_to(prompt_tokens) - self._work_up_to(cut)
        return max(floor, before) + max(floor, after) - max(floor, before + after)

    def hybrid_prefill_seconds(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        """One prompt's prefill on the hybrid route (a request that holds an image)."""
        return self.prefill_batch_seconds([(prompt_tokens, cached_tokens)], hybrid=True)

    def vision_seconds(self, patches: Sequence[int]) -> float:
        """The vision tower over each image's patches (attention within each image)."""
        images = self._images()
        a, b = images.vision_seconds_per_patch, images.vision_seconds_per_patch_squared
        return sum(a * p + b * p * p for p in patches)

    def preprocess_seconds(self, megapixels: Sequence[float]) -> float:
        """Decoding and resizing the source images."""
        return self._images().preprocess_seconds_per_megapixel * sum(megapixels)

    def image_seconds(
        self, images: Sequence[ImageSize], cached_tokens: int, images_end: int
    ) -> tuple[float, float]:
        """(preprocessing, vision tower) of a request's images. The tower is skipped when the
        cached prefix covers every image (SGLang's mm_utils.py); preprocessing never is."""
        preprocess = self.preprocess_seconds([image.megapixels for image in images])
        if cached_tokens >= images_end:
            return preprocess, 0.0
        return preprocess, self.vision_seconds([image.patches for image in images])

    def _images(self) -> ImageProfile:
        if self._profile.images is None:
            raise ValueError("the profile has no images section: the model takes no images")
        return self._profile.images

    def batch_factor(self, batch_size: int) -> float:
        """How much longer a step with batch_size requests takes than a bs1 step."""
        if batch_size <= 1:
            return 1.0
        return max(1.0, interpolate(self._batch_points, float(batch_size)))

    def decode_step_seconds(self, context_tokens: int, batch_size: int = 1) -> float:
        """One decode step; the batch's longest context sets the attention cost."""
        ms = interpolate(self._profile.decode_ms_by_context, float(context_tokens))
        ms = max(ms, self._profile.decode_ms_by_context[0][1])
        return ms * self.batch_factor(batch_size) / 1000.0
