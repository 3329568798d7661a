"""The markdown summary of `python -m bench images-device`."""

from __future__ import annotations

from dataclasses import dataclass

from bench.images_calibrate import Calibration, profile_snippet
from bench.images_colour import ColourCase
from bench.images_engine import PROBE_SIZE, EngineInfo
from bench.images_steps import Probe, SizeRow, median, row_ok


@dataclass(frozen=True)
class Outcome:
    """Everything the run found, for the summary and the JSON."""

    info: EngineInfo
    repeats: int
    rows: list[SizeRow]
    probe: Probe
    calibration: Calibration
    # None: step c skipped (no gateway); [] with a note: it failed before asking.
    colour: list[ColourCase] | None
    # The engine's own chat server on the same cases (not judged); None when not asked.
    engine_colour: list[ColourCase] | None
    colour_note: str
    colour_judged: bool

    @property
    def tokens_ok(self) -> bool:
        return all(row_ok(row, self.info) for row in self.rows)

    @property
    def vision_ok(self) -> bool:
        return self.probe.error is None and all(row.error is None for row in self.rows)

    @property
    def colour_ok(self) -> bool:
        if self.colour is None:
            return True
        return bool(self.colour) and all(
            case.error is None and case.verdict in {"pass", "not judged"} for case in self.colour
        )

    @property
    def ok(self) -> bool:
        return self.tokens_ok and self.vision_ok and self.colour_ok


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _tokens(outcome: Outcome) -> list[str]:
    lines = [
        "| image | resized | formula tokens | measured | engine prompt tokens | gateway estimate "
        "| ok |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in outcome.rows:
        capped = " (capped)" if row.over_max_pixels else ""
        ok = "yes" if row_ok(row, outcome.info) else f"**no** {row.error or ''}"
        lines.append(
            f"| {row.label} | {row.resized_width}x{row.resized_height}{capped} "
            f"| {row.expected_tokens} | {row.measured_tokens} | {row.engine_prompt_tokens} "
            f"| {row.gateway_estimate} | {ok} |"
        )
    if outcome.info.simulator:
        lines += [
            "",
            "The gateway estimate is not judged here: the simulator's tokenizer spells the "
            "image markers in byte chunks, where the engine has one token each.",
        ]
    return lines


def _vision(outcome: Outcome) -> list[str]:
    info, cal, probe = outcome.info, outcome.calibration, outcome.probe
    width, height = PROBE_SIZE
    lines = [
        f"| image | image tokens | text TTFT ms | image TTFT ms | added ms "
        f"| vision + preprocessing beyond {width}x{height}, ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in outcome.rows:
        text, image = median(row.ttft_text_s), median(row.ttft_image_s)
        added = None if text is None or image is None else image - text
        lines.append(
            f"| {row.label} | {row.expected_tokens} | {_ms(text)} | {_ms(image)} | {_ms(added)} "
            f"| {_ms(cal.vision_s.get(row.label))} |"
        )
    lines.append("")
    if info.simulator:
        lines += [
            f"TTFTs are wall time; the derived figures are the simulator's modelled seconds "
            f"(wall / time-scale {info.time_scale:g}), which also scales its real decode time.",
            "",
        ]
    if probe.error:
        lines += [f"The probe failed: {probe.error}", ""]
    rate = cal.hybrid_tokens_per_second
    lines.append(
        f"Hybrid prefill rate: {'-' if rate is None else f'{rate:.1f}'} tok/s (a {width}x{height} "
        f"image after {probe.short_prompt_tokens} and {probe.long_prompt_tokens} prompt tokens)."
    )
    cached = max([row.cached_tokens for row in outcome.rows] + [probe.cached_tokens])
    if cached:
        lines.append(f"Warning: a request hit the prefix cache ({cached} tokens): times are low.")
    snippet = profile_snippet(cal, info, outcome.tokens_ok)
    return [*lines, "", "```yaml", snippet, "```"]


def _cases(cases: list[ColourCase]) -> list[str]:
    lines = [
        "| call_a | call_b | HTTP | prompt tokens | answer | verdict |",
        "|---|---|---|---:|---|---|",
    ]
    for case in cases:
        answer = (case.answer or "").replace("\n", " ").replace("|", "/")[:80]
        verdict = case.verdict if case.error is None else f"**error** {case.error[:120]}"
        lines.append(
            f"| {case.call_a} | {case.call_b} | {case.status} | {case.prompt_tokens} "
            f"| {answer} | {verdict} |"
        )
    return lines


def _colour(outcome: Outcome) -> list[str]:
    blocks = [[outcome.colour_note]] if outcome.colour_note else []
    if outcome.colour:
        blocks.append(["Through the gateway:", "", *_cases(outcome.colour)])
    if outcome.engine_colour:
        blocks.append(
            [
                "The engine's own /v1/chat/completions, for the record (not judged; MEDIA.md 3.4 "
                "expects it to pair each image with the other result):",
                "",
                *_cases(outcome.engine_colour),
            ]
        )
    return [line for i, block in enumerate(blocks) for line in ([""] if i else []) + block]


def markdown(outcome: Outcome) -> str:
    info = outcome.info
    source = "from /server_info" if info.max_pixels_reported else "the engine's default"
    kind = "the simulator" if info.simulator else "a real engine"
    if outcome.colour is None:
        colour = "skipped"
    else:
        colour = "PASS" if outcome.colour_ok else "FAIL"
        colour += "" if outcome.colour_judged else " (plumbing only)"
    return "\n".join(
        [
            "## Images on the engine (python -m bench images-device)",
            "",
            f"{kind}; image max_pixels {info.max_pixels:,} ({source}); "
            f"medians of {outcome.repeats}.",
            "",
            f"### a. Prompt tokens per image size: {'PASS' if outcome.tokens_ok else 'FAIL'}",
            "",
            *_tokens(outcome),
            "",
            "### b. Time an image adds before the first token: "
            + ("figures" if outcome.vision_ok else "FAIL (requests failed)"),
            "",
            *_vision(outcome),
            "",
            f"### c. Reordered tool results, colour test: {colour}",
            "",
            *_colour(outcome),
        ]
    )
