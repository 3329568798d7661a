"""Parser cost per output token at short and long outputs (`python -m bench parsers`).

The gateway feeds the parser one engine chunk at a time; a parser that rescans what it has
already seen costs O(n) per token and O(n^2) per response. This suite streams synthetic GLM
outputs of 1k and 32k tokens through the registry's parser, one token per feed, and reports
the cost per token: it must stay flat as the output grows. Scenarios:

- reasoning+content: half reasoning, `</think>`, half content;
- many calls: back-to-back small tool calls (name, a string, an integer);
- long string argument: one call whose string value is the whole output (streamed);
- long JSON argument: one call whose object value is the whole output (buffered, typed once).

Tokens are 1-6 character word pieces, with each markup tag as one token (as GLM's tokenizer
has them). Besides the average per token, the 1,000 tokens just before the closing tags are
timed on their own: their cost per token at 32k must match the 1k output's. Timing is
wall-clock on whatever runs it; the figures to compare are the ratios.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.parsers.registry import get_parser_factory

FAMILY = "glm47"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "store",
            "parameters": {"type": "object", "properties": {"doc": {"type": "object"}}},
        },
    },
]


def _words(rng: random.Random, count: int) -> list[str]:
    pieces = ["the", " model", " think", "s", " about", " it", ",", ".", "\n", " <b>", " a", "<"]
    return [rng.choice(pieces) for _ in range(count)]


def _reasoning_content(rng: random.Random, n: int) -> list[str]:
    half = n // 2
    return [*_words(rng, half), "</think>", *_words(rng, n - half - 1)]


def _many_calls(rng: random.Random, n: int) -> list[str]:
    tokens = [*_words(rng, 8), "</think>"]
    while len(tokens) < n:
        tokens += ["<tool_call>", "get", "_weather", "<arg_key>", "city", "</arg_key>"]
        tokens += ["<arg_value>", "San", " Fran", "cisco", "</arg_value>", "<arg_key>", "days"]
        tokens += ["</arg_key>", "<arg_value>", "1", "4", "</arg_value>", "</tool_call>"]
    return tokens[:n]


def _long_string(rng: random.Random, n: int) -> list[str]:
    head = ["</think>", "<tool_call>", "write", "_file", "<arg_key>", "content", "</arg_key>"]
    head += ["<arg_value>"]
    tail = ["</arg_value>", "</tool_call>"]
    return head + _words(rng, n - len(head) - len(tail)) + tail


def _long_json(rng: random.Random, n: int) -> list[str]:
    head = ["</think>", "<tool_call>", "store", "<arg_key>", "doc", "</arg_key>", "<arg_value>"]
    body = ['{"items": [']
    while len(head) + len(body) < n - 4:
        body += ['"', rng.choice(["a", "bc", "def"]), '"', ", "]
    body += ['"end"', "]}"]
    return head + body + ["</arg_value>", "</tool_call>"]


SCENARIOS: dict[str, Callable[[random.Random, int], list[str]]] = {
    "reasoning+content": _reasoning_content,
    "many calls": _many_calls,
    "long string argument": _long_string,
    "long JSON argument": _long_json,
}


WINDOW = 1_000
# The window ends this many tokens before the output does, so it measures the steady state
# and not the closing tags (where a buffered value is typed, once, in O(its length)).
WINDOW_OFFSET = 16


def _time_once(tokens: list[str]) -> tuple[float, float]:
    """Seconds for the whole output, and for the WINDOW tokens near its end (marginal cost)."""
    factory = get_parser_factory(FAMILY)
    parser = factory(tools=TOOLS, tool_choice="auto", starts_in_reasoning=True)
    window_end = max(0, len(tokens) - WINDOW_OFFSET)
    window_start = max(0, window_end - WINDOW)
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for token in tokens[:window_start]:
            parser.feed(token)
        window_started = time.perf_counter()
        for token in tokens[window_start:window_end]:
            parser.feed(token)
        window_ended = time.perf_counter()
        for token in tokens[window_end:]:
            parser.feed(token)
        parser.finish()
        end = time.perf_counter()
    finally:
        gc.enable()
    return end - start, window_ended - window_started


def measure(lengths: list[int], repeats: int, seed: int = 0) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for scenario, make in SCENARIOS.items():
        for length in lengths:
            tokens = make(random.Random(seed), length)
            window = len(tokens) - WINDOW_OFFSET
            runs = [_time_once(tokens) for _ in range(repeats)]
            total = min(whole for whole, _ in runs)
            tail = min(last for _, last in runs)
            rows.append(
                {
                    "scenario": scenario,
                    "tokens": len(tokens),
                    "seconds": total,
                    "us_per_token": total / len(tokens) * 1e6,
                    "us_per_token_last_window": tail / max(1, min(WINDOW, window)) * 1e6,
                }
            )
    return rows


def _ratios(rows: list[dict[str, Any]], column: str) -> dict[str, float]:
    """Per scenario: the column at the longest output over the column at the shortest."""
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_scenario.setdefault(row["scenario"], []).append(row)
    ratios = {}
    for name, group in by_scenario.items():
        group.sort(key=lambda r: r["tokens"])
        ratios[name] = group[-1][column] / group[0][column]
    return ratios


def _markdown(rows: list[dict[str, Any]], repeats: int) -> str:
    lengths = sorted({r["tokens"] for r in rows})
    whole = _ratios(rows, "us_per_token")
    marginal = _ratios(rows, "us_per_token_last_window")
    header = "| scenario | " + " | ".join(
        f"µs/token @ {n:,} (last {min(WINDOW, n):,})" for n in lengths
    )
    lines = [header + " | longest/shortest (last) |", "|---" * (len(lengths) + 2) + "|"]
    for scenario in SCENARIOS:
        cells = [
            f"{r['us_per_token']:.2f} ({r['us_per_token_last_window']:.2f})"
            for n in lengths
            for r in rows
            if r["scenario"] == scenario and r["tokens"] == n
        ]
        ratio = f"{whole[scenario]:.2f} ({marginal[scenario]:.2f})"
        lines.append(f"| {scenario} | " + " | ".join(cells) + f" | {ratio} |")
    machine = f"{platform.python_implementation()} {platform.python_version()}, "
    machine += f"{os.cpu_count()} CPUs visible"
    return "\n".join(
        [
            "## Parser cost per output token",
            "",
            f"Family `{FAMILY}`, one token per feed, best of {repeats} runs ({machine}); the "
            "garbage collector is paused while timing. In brackets: the cost of the last "
            f"{WINDOW:,} tokens before the closing tags only, i.e. per token at that "
            "position. Flat means the ratios stay near 1 (a shared machine adds noise).",
            "",
            *lines,
        ]
    )


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    repeats = 5
    rows = measure([1_000, 32_000], repeats)
    (out_dir / "parser_cost.json").write_text(json.dumps(rows, indent=2) + "\n")
    return _markdown(rows, repeats)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench parsers", description=__doc__)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1_000, 32_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="also write rows as JSON here")
    args = parser.parse_args(argv)
    rows = measure(args.tokens, args.repeats)
    print(_markdown(rows, args.repeats))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "parser_cost.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0
