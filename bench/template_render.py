"""Chat-template render time against the number of parallel tool calls.

`python -m bench template [--sizes 10 100 400 800] [--repeats 21] [--reference-repeats 3]
[--out DIR]` renders one conversation per size (a user turn, an assistant turn with n parallel
tool calls, n results in shuffled order) with:
- the model's own template (../shared/reference, or FLASHBOX_REFERENCE_DIR) in transformers'
  Jinja2 environment, messages already normalised (template time only);
- the gateway's production path: build_renderer(RenderSettings()) from the request's dicts
  (normalisation, pre-pass, engine choice and render all included);
- the bundled template alone (no pre-pass) in Jinja2 and in MiniJinja.
Median CPU time of the repeats (wall time too, in the JSON), all in one run; speedups are
against the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.render import RenderSettings, build_renderer
from gateway.render.environments import jinja2_template, minijinja_environment
from gateway.render.normalize import normalise_messages
from gateway.render.source import BUNDLED_TEMPLATE, TemplateSource

SIZES = (10, 100, 400, 800)
GOAL_SPEEDUP_800 = 500.0
GOAL_SCALING = 2.2
REPO_ROOT = Path(__file__).resolve().parents[1]


def reference_template() -> Path:
    base = os.environ.get("FLASHBOX_REFERENCE_DIR")
    root = Path(base) if base else REPO_ROOT.parent / "shared" / "reference"
    return root / "glm-5.3-flash" / "chat_template.jinja"


def conversation(n: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A user turn, n parallel calls with JSON-string arguments, n results shuffled; tools."""
    rng = random.Random(seed)
    calls = [
        {
            "id": f"call_{i:04d}",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"query": f"item {i}", "n": i})},
        }
        for i in range(n)
    ]
    results = [
        {"role": "tool", "tool_call_id": f"call_{i:04d}", "content": f"r{i}"} for i in range(n)
    ]
    rng.shuffle(results)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "look these up"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *results,
    ]
    tools: list[dict[str, Any]] = [
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    ]
    return messages, tools


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call. CPU time is what the table shows: on a shared
    machine it does not count the time spent waiting for a core."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def medians(paths: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median CPU and wall time per path; rounds interleave the paths so that a burst of load
    from elsewhere falls on all of them alike."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, fn in paths.items():
            samples[name].append(timed(fn))
    out: dict[str, float] = {}
    for name, values in samples.items():
        out[f"{name}_s"] = statistics.median(cpu for cpu, _ in values)
        out[f"{name}_wall_s"] = statistics.median(wall for _, wall in values)
    return out


def measure_size(
    n: int,
    paths: dict[str, Any],
    repeats: int,
    reference_repeats: int,
) -> dict[str, Any]:
    messages, tools = conversation(n, seed=n)
    context = {
        "messages": normalise_messages(messages),
        "tools": tools,
        "documents": None,
        "add_generation_prompt": True,
    }
    production, alone_j2, alone_mj, reference = (
        paths["production"],
        paths["jinja2"],
        paths["minijinja"],
        paths["reference"],
    )
    expected = alone_j2.render(context)
    # Every path must produce the same text, or its time means nothing.
    assert production.render(messages, tools, {}) == expected
    assert alone_mj.render_template("t", **context) == expected
    row: dict[str, Any] = {"n": n}
    if reference is not None:
        assert reference.render(context) == expected
        row.update(medians({"reference": lambda: reference.render(context)}, reference_repeats))
    paths_to_time: dict[str, Callable[[], object]] = {
        "production": lambda: production.render(messages, tools, {}),
        "template_jinja2": lambda: alone_j2.render(context),
        "template_minijinja": lambda: alone_mj.render_template("t", **context),
    }
    row.update(medians(paths_to_time, repeats))
    return row


def measure(sizes: tuple[int, ...], repeats: int, reference_repeats: int) -> dict[str, Any]:
    bundled_text = BUNDLED_TEMPLATE.read_text(encoding="utf-8")
    ref_path = reference_template()
    paths: dict[str, Any] = {
        "production": build_renderer(
            RenderSettings(), source=TemplateSource(bundled_text, "bundled")
        ),
        "jinja2": jinja2_template(bundled_text),
        "minijinja": minijinja_environment(bundled_text, "t"),
        "reference": jinja2_template(ref_path.read_text(encoding="utf-8"))
        if ref_path.is_file()
        else None,
    }
    rows: list[dict[str, Any]] = []
    for n in sizes:
        rows.append(measure_size(n, paths, repeats, reference_repeats))
        print(json.dumps(rows[-1]), flush=True)
    return {
        "rows": rows,
        "repeats": repeats,
        "reference_repeats": reference_repeats,
        "reference": str(ref_path) if paths["reference"] is not None else None,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    has_ref = result["reference"] is not None
    lines = [
        "## Chat-template render time vs parallel tool calls",
        "",
        f"Median CPU time per render in ms ({result['repeats']} interleaved repeats; reference "
        f"{result['reference_repeats']}), one run, {result['cpus']} CPUs, Python "
        f"{result['python']}; wall-clock medians are in template_render.json. (x) = speedup "
        "over the reference template in transformers' Jinja2 environment.",
        "",
        "| calls | reference | production path | template, Jinja2 | template, MiniJinja |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        ref = row.get("reference_s")

        def cell(key: str, ref: float | None = ref, row: dict[str, Any] = row) -> str:
            value = row[key]
            return f"{_ms(value)} ({ref / value:.0f}x)" if ref else _ms(value)

        lines.append(
            f"| {row['n']} | {_ms(ref) if ref else 'n/a'} | {cell('production_s')} | "
            f"{cell('template_jinja2_s')} | {cell('template_minijinja_s')} |"
        )
    by_n = {row["n"]: row for row in rows}
    if 400 in by_n and 800 in by_n:
        scaling = by_n[800]["production_s"] / by_n[400]["production_s"]
        verdict = "met" if scaling <= GOAL_SCALING else "MISSED"
        lines += [
            "",
            f"Production time(800)/time(400) = {scaling:.2f} (goal <= {GOAL_SCALING}: {verdict}).",
        ]
        if has_ref:
            speedup = by_n[800]["reference_s"] / by_n[800]["production_s"]
            verdict = "met" if speedup >= GOAL_SPEEDUP_800 else "MISSED"
            lines.append(
                f"Production speedup at 800 calls = {speedup:.0f}x "
                f"(goal >= {GOAL_SPEEDUP_800:.0f}x: {verdict})."
            )
    if not has_ref:
        lines += ["", "Reference template not found (set FLASHBOX_REFERENCE_DIR): no speedups."]
    return "\n".join(lines) + "\n"


def _run(out_dir: Path | None, sizes: tuple[int, ...], repeats: int, ref_repeats: int) -> str:
    result = measure(sizes, repeats, ref_repeats)
    text = markdown(result)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "template_render.json").write_text(json.dumps(result, indent=2) + "\n")
        (out_dir / "template_render.md").write_text(text)
    return text


def report(out_dir: Path) -> str:
    return _run(out_dir, SIZES, repeats=21, ref_repeats=3)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench template", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--reference-repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    print(_run(args.out, tuple(args.sizes), args.repeats, args.reference_repeats))
    return 0
