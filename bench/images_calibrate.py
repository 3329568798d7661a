"""Step b's figures turned into the simulator profile's `images:` fields (config/sim/*.yaml,
docs/simulator.md "Images").

The simulator charges an image request: its uncached prompt at the hybrid rate
(`hybrid_prefill.tokens_per_second` over `floor_seconds`), plus per image the vision tower
`a*P + b*P^2` (P = 4 x its tokens) and preprocessing per source megapixel. From outside the
engine only TTFT is seen, and within one size list tokens and patches grow together, so:

- the hybrid rate comes from the probe: the same small image after a short and a long text
  (both requests take the hybrid route), tokens over seconds;
- each size's vision + preprocessing beyond the small image's is its TTFT over the small
  image's, less its extra tokens at that rate;
- a least-squares fit of those over (P, P^2, megapixels), relative to the small image, gives
  a, b and the per-megapixel cost; the source megapixels separate from P only where the
  resize rule caps P (the image above max_pixels).

Against the simulator, times are divided by its time scale (its modelled seconds).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.images_engine import PROBE_SIZE, EngineInfo
from bench.images_steps import PATCHES_PER_TOKEN, Probe, SizeRow, median
from gateway.media.tokens import image_tokens

# A pivot this small (after scaling each column to 1) means the sizes cannot separate the terms.
SINGULAR = 1e-9


@dataclass(frozen=True)
class Calibration:
    hybrid_tokens_per_second: float | None
    # TTFT of the small image's short request less its prompt at the hybrid rate: the floor
    # plus the small image's own vision time plus the request's overhead (an upper bound).
    intercept_s: float | None
    # Per size label: vision + preprocessing beyond the 224x224 image's, modelled seconds.
    vision_s: dict[str, float]
    seconds_per_patch: float | None
    seconds_per_patch_squared: float | None
    preprocess_seconds_per_megapixel: float | None
    fitted_sizes: int


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(rhs)
    a = [[*row, rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < SINGULAR:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def least_squares(xs: list[list[float]], ys: list[float]) -> list[float] | None:
    """Coefficients c minimising sum((x.c - y)^2), through the origin; None when the rows do
    not determine them. Columns are scaled to unit size first (P^2 is ~1e8 times P)."""
    if not xs or len(xs) < len(xs[0]):
        return None
    width = len(xs[0])
    scales = [max(abs(row[j]) for row in xs) or 1.0 for j in range(width)]
    scaled = [[row[j] / scales[j] for j in range(width)] for row in xs]
    normal = [[sum(row[i] * row[j] for row in scaled) for j in range(width)] for i in range(width)]
    rhs = [sum(row[i] * y for row, y in zip(scaled, ys, strict=True)) for i in range(width)]
    solution = _solve(normal, rhs)
    if solution is None:
        return None
    return [c / s for c, s in zip(solution, scales, strict=True)]


def calibrate(rows: list[SizeRow], probe: Probe, info: EngineInfo) -> Calibration:
    scale = info.time_scale
    short, long = median(probe.short_ttft_s), median(probe.long_ttft_s)
    extra_tokens = probe.long_prompt_tokens - probe.short_prompt_tokens
    rate: float | None = None
    if short is not None and long is not None and long > short and extra_tokens > 0:
        rate = extra_tokens / ((long - short) / scale)
    if rate is None or short is None:
        return Calibration(rate, None, {}, None, None, None, 0)
    ref_s = short / scale
    intercept = ref_s - probe.short_prompt_tokens / rate
    width, height = PROBE_SIZE
    ref_patches = image_tokens(width, height, max_pixels=info.max_pixels) * PATCHES_PER_TOKEN
    ref_megapixels = width * height / 1e6
    vision: dict[str, float] = {}
    xs: list[list[float]] = []
    ys: list[float] = []
    for row in rows:
        image = median(row.ttft_image_s)
        if row.error is not None or image is None or row.engine_prompt_tokens is None:
            continue
        extra = row.engine_prompt_tokens - probe.short_prompt_tokens
        seconds = image / scale - ref_s - extra / rate
        vision[row.label] = seconds
        if row.patches != ref_patches:
            xs.append(
                [
                    row.patches - ref_patches,
                    row.patches**2 - ref_patches**2,
                    row.megapixels - ref_megapixels,
                ]
            )
            ys.append(seconds)
    fit = least_squares(xs, ys)
    return Calibration(
        hybrid_tokens_per_second=rate,
        intercept_s=intercept,
        vision_s=vision,
        seconds_per_patch=None if fit is None else fit[0],
        seconds_per_patch_squared=None if fit is None else fit[1],
        preprocess_seconds_per_megapixel=None if fit is None else fit[2],
        fitted_sizes=len(xs) if fit is not None else 0,
    )


def _fitted(value: float | None, sizes: int) -> str:
    if value is None:
        return "null   # not calibrated: too few sizes (or none that separate the terms)"
    if value < 0:
        return f"{value:.3g}   # fit negative (noise, or a term the sizes miss): keep the profile's"
    return f"{value:.3g}   # calibrated: least-squares fit over {sizes} sizes"


def profile_snippet(cal: Calibration, info: EngineInfo, tokens_passed: bool) -> str:
    """The `images:` fields these figures calibrate, as YAML with a comment on each."""
    width, height = PROBE_SIZE
    if info.max_pixels_reported:
        pixels = f"{info.max_pixels}   # the engine's --mm-process-config (/server_info)"
    else:
        pixels = "null   # the engine's default (--mm-process-config sets none)"
    pixels += "; token rule confirmed by step a" if tokens_passed else "; step a FAILED"
    if cal.hybrid_tokens_per_second is None:
        rate = "null   # not calibrated: the probe did not give a rate"
    else:
        rate = (
            f"{cal.hybrid_tokens_per_second:.1f}   # calibrated: a {width}x{height} image after a "
            "short and a long text"
        )
    floor = "0.0   # not calibrated"
    if cal.intercept_s is not None:
        floor += (
            f": the intercept, {cal.intercept_s:.3f} s, bounds it (it also holds a {width}x{height}"
            " image's vision and the request's overhead)"
        )
    return "\n".join(
        [
            "images:",
            f"  max_pixels: {pixels}",
            "  hybrid_prefill:",
            f"    tokens_per_second: {rate}",
            f"    floor_seconds: {floor}",
            "  vision:",
            f"    seconds_per_patch: {_fitted(cal.seconds_per_patch, cal.fitted_sizes)}",
            "    seconds_per_patch_squared: "
            + _fitted(cal.seconds_per_patch_squared, cal.fitted_sizes),
            "    preprocess_seconds_per_megapixel: "
            + _fitted(cal.preprocess_seconds_per_megapixel, cal.fitted_sizes),
        ]
    )
