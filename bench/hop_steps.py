"""`python -m bench steps`: what each step of the gateway's request path costs, warm and idle.

The gateway's own work between a request's arrival and its /generate (parse and validate,
session key, render, replica pick, the engine body, the parser) runs in-process here, step by
step, on the same request twice over:
  warm   back to back, as in a loop: the code and data in the CPU's caches
  idle   after `--idle-ms` of sleep, as a real request meets the gateway (it idles through
         the engine's prefill and between requests, while other processes use the core)
On a shared machine the idle figure is many times the warm one: the caches were refilled by
someone else. This is where a Python hop's time to first token goes (docs/benchmarks.md).
Medians of `--repeats` runs, in microseconds, for a one-message request (the overhead
benchmark's) and an agentic one (a user turn, N parallel tool calls, N results).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson

from bench.stats import percentile
from bench.template_render import conversation
from gateway.core.retry import request_session_key
from gateway.faces.openai_chat.input import parse_chat
from gateway.routing import RequestContext
from gateway.sampling import add_constraint, generate_body
from gateway.settings import Settings
from gateway.state import AppState, build_state

MODEL = "glm-5.3-flash"


def _bodies(tool_calls: int) -> dict[str, bytes]:
    one = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Benchmark request: say something short."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 4096,
    }
    messages, tools = conversation(tool_calls)
    agentic = {**one, "messages": messages, "tools": tools}
    return {"one message": orjson.dumps(one), f"{tool_calls} tool results": orjson.dumps(agentic)}


def _steps(state: AppState, body: bytes) -> dict[str, Callable[[], object]]:
    settings = state.settings
    chat = parse_chat(body, settings).core
    kwargs = chat.template_kwargs
    prompt = state.renderer.render(chat.messages, chat.tools, kwargs)

    def pick() -> object:
        # A new session each time: placement, the costlier path.
        ctx = RequestContext(uuid.uuid4().hex, uuid.uuid4().hex, prompt)
        return state.picker.pick(ctx)

    def engine_body() -> object:
        payload = generate_body(chat, prompt, "rid", settings)
        add_constraint(
            payload,
            state.constraint_builder(tools=chat.tools, tool_choice=None, starts_in_reasoning=True),
        )
        state.parser_factory(tools=chat.tools, tool_choice=None, starts_in_reasoning=True)
        return orjson.dumps(payload)

    steps: dict[str, Callable[[], object]] = {
        "parse + validate": lambda: parse_chat(body, settings),
        "session key": lambda: request_session_key(chat, settings.routing),
        "render": lambda: state.renderer.render(chat.messages, chat.tools, kwargs),
        "replica pick": pick,
        "engine body + parser": engine_body,
    }

    each = list(steps.values())

    def all_steps() -> object:
        for step in each:
            step()
        return None

    steps["all of the above"] = all_steps
    return steps


def _time(step: Callable[[], object], repeats: int, idle_s: float) -> tuple[float, float]:
    clock = time.perf_counter
    for _ in range(50):
        step()
    warm: list[float] = []
    for _ in range(repeats):
        started = clock()
        step()
        warm.append(clock() - started)
    idle: list[float] = []
    for _ in range(repeats):
        time.sleep(idle_s)
        started = clock()
        step()
        idle.append(clock() - started)
    return percentile(warm, 50) * 1e6, percentile(idle, 50) * 1e6


def measure(repeats: int, idle_ms: float, tool_calls: int) -> dict[str, dict[str, list[float]]]:
    settings = Settings(engines=["http://127.0.0.1:9"])
    state = build_state(settings)
    for replica in state.picker.replicas:
        replica.healthy = True  # no prober runs here
    results: dict[str, dict[str, list[float]]] = {}
    for label, body in _bodies(tool_calls).items():
        results[label] = {
            name: list(_time(step, repeats, idle_ms / 1000))
            for name, step in _steps(state, body).items()
        }
    return results


def markdown(results: dict[str, dict[str, list[float]]], idle_ms: float) -> str:
    labels = list(results)
    head = " | ".join(f"{label}: warm / idle µs | idle/warm" for label in labels)
    lines = [f"| step | {head} |", "|---" * (1 + 2 * len(labels)) + "|"]
    for name in results[labels[0]]:
        cells = []
        for label in labels:
            warm, idle = results[label][name]
            cells.append(f"{warm:.1f} / {idle:.1f} | {idle / warm:.0f}x")
        lines.append(f"| {name} | {' | '.join(cells)} |")
    lines.append("")
    lines.append(f"idle = after {idle_ms:g} ms of sleep; medians.")
    return "\n".join(lines)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench steps", description=__doc__)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--idle-ms", type=float, default=10.0)
    parser.add_argument("--tool-calls", type=int, default=50)
    parser.add_argument("--out", type=Path, default=None, help="write results JSON here")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    results = measure(args.repeats, args.idle_ms, args.tool_calls)
    print(markdown(results, args.idle_ms))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    args = _parse([])
    results = measure(args.repeats, args.idle_ms, args.tool_calls)
    (out_dir / "steps.json").write_text(json.dumps(results, indent=2))
    return (
        "## The gateway's request path, step by step (warm and after idling)\n\n"
        f"{markdown(results, args.idle_ms)}\n"
    )
