"""`python -m bench sessions`: multi-turn agentic sessions -> TTFT by turn and checkpoint hits.

Each session starts from a large base prompt (an agentic client's system prompt and tool list,
~30k tokens by default) and grows every turn: the assistant's reply goes back as history, and
its tool calls get tool results (or a user message follows when it made none). A turn >= 2 is
"eligible" for a checkpoint hit when its prompt extends the previous turn's; it "hit" when the
server's usage.prompt_tokens_details.cached_tokens covers the previous prompt rounded down to the
track interval. The affinity benchmark drives the same workload through different routers.

`--shape FILE` replays a session shape instead (bench/shapes.py: main conversations, subagents,
side requests and compactions under one session, as real clients send them; bench/replay.py)
through the API the shape names, and reports per lineage kind (bench/replay_report.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from bench.client import stream_chat
from bench.replay import ReplayConfig, replay
from bench.replay import with_engine_timings as replay_with_timings
from bench.replay_report import markdown as replay_markdown
from bench.replay_report import summarize_replay
from bench.replay_wire import chat_assistant_message, chat_follow_up
from bench.shapes import load_shape
from bench.stats import ratio, summarize

# Re-exported: bench/overhead.py and the tests take them from here.
from bench.timings import EngineTiming as EngineTiming
from bench.timings import fetch_engine_timings as fetch_engine_timings
from bench.timings import hardware_ttft
from bench.workload import synthetic_text

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite, optionally one test.",
            "parameters": {
                "type": "object",
                "properties": {"select": {"type": "string"}, "verbose": {"type": "boolean"}},
            },
        },
    },
]


@dataclass(frozen=True)
class SessionsConfig:
    url: str
    model: str
    api_key: str | None
    sessions: int
    turns: int
    concurrency: int
    base_tokens: int
    growth_tokens: int
    max_tokens: int
    chars_per_token: float
    track_interval: int
    time_scale: float
    send_session_header: bool
    timeout_s: float
    # Mean pause between a reply and the next turn (tools running, a person reading), in
    # hardware seconds; sessions also start spread over one mean pause. 0 = back to back.
    think_s: float = 0.0
    # Varies the pauses and start times (0: the original draws, one generator per session).
    seed: int = 0
    # Sessions start spread evenly over this many hardware seconds (None: one mean pause).
    ramp_s: float | None = None


@dataclass
class TurnResult:
    session: int
    turn: int
    ok: bool
    ttft: float | None
    prompt_tokens: int
    cached_tokens: int
    eligible: bool
    hit: bool
    replica: str | None
    error: str | None
    # When the turn was sent, hardware seconds since its session's first turn could start.
    sent_s: float = 0.0
    # The x-request-id it was sent with (the engine's rid, through every router here).
    rid: str = ""
    # The client's wall-clock TTFT divided by the time scale: `ttft` until engine timings
    # replace it (with_engine_timings), kept for comparison.
    ttft_scaled: float | None = None


HeaderFn = Callable[[int], Mapping[str, str]]


async def run_session(
    client: httpx.AsyncClient,
    cfg: SessionsConfig,
    index: int,
    extra_headers: HeaderFn | None = None,
) -> list[TurnResult]:
    rng = random.Random(index + cfg.seed * 1_000_003)
    base = synthetic_text(int(cfg.base_tokens * cfg.chars_per_token), seed=index)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"session {index}. {base}"},
        {"role": "user", "content": f"Fix the failing test number {rng.randrange(1000)}."},
    ]
    headers: dict[str, str] = {}
    if cfg.api_key:
        headers["authorization"] = f"Bearer {cfg.api_key}"
    if cfg.send_session_header:
        headers["x-session-id"] = f"bench-session-{index}"
    if extra_headers is not None:
        headers.update(extra_headers(index))
    results: list[TurnResult] = []
    previous_prompt = 0
    loop = asyncio.get_running_loop()
    origin = loop.time()
    ramp = cfg.think_s if cfg.ramp_s is None else cfg.ramp_s
    if ramp > 0:
        await asyncio.sleep(rng.uniform(0, ramp) * cfg.time_scale)
    for turn in range(1, cfg.turns + 1):
        if turn > 1 and cfg.think_s > 0:
            await asyncio.sleep(rng.expovariate(1 / cfg.think_s) * cfg.time_scale)
        body = {
            "model": cfg.model,
            "messages": messages,
            "tools": TOOLS,
            "max_tokens": cfg.max_tokens,
            "temperature": 0,
        }
        sent = loop.time()
        rid = f"bench-s{index}-t{turn}-{uuid.uuid4().hex[:12]}"
        record = await stream_chat(
            client,
            cfg.url.rstrip("/") + "/chat/completions",
            body,
            {**headers, "x-request-id": rid},
        )
        scaled = record.ttft / cfg.time_scale if record.ttft is not None else None
        eligible = turn >= 2 and previous_prompt >= cfg.track_interval
        floor = previous_prompt // cfg.track_interval * cfg.track_interval
        results.append(
            TurnResult(
                session=index,
                turn=turn,
                ok=record.ok,
                ttft=scaled,
                prompt_tokens=record.prompt_tokens,
                cached_tokens=record.cached_tokens,
                eligible=eligible and record.ok,
                hit=eligible and record.cached_tokens >= floor > 0,
                replica=record.replica,
                error=record.error,
                sent_s=(sent - origin) / cfg.time_scale,
                rid=rid,
                ttft_scaled=scaled,
            )
        )
        if not record.ok:
            break
        previous_prompt = record.prompt_tokens
        growth = synthetic_text(
            int(cfg.growth_tokens * cfg.chars_per_token), seed=index * 1000 + turn
        )
        messages = [*messages, chat_assistant_message(record), *chat_follow_up(record, growth)]
    return results


async def run_sessions(
    cfg: SessionsConfig, extra_headers: HeaderFn | None = None
) -> list[TurnResult]:
    """All sessions, at most `concurrency` at once; turns of one session run in order."""
    limits = httpx.Limits(max_connections=cfg.concurrency + 4)
    gate = asyncio.Semaphore(cfg.concurrency)
    async with httpx.AsyncClient(
        limits=limits, timeout=httpx.Timeout(cfg.timeout_s, connect=10.0)
    ) as client:

        async def one(i: int) -> list[TurnResult]:
            async with gate:
                return await run_session(client, cfg, i, extra_headers)

        nested = await asyncio.gather(*(one(i) for i in range(cfg.sessions)))
    return [turn for session in nested for turn in session]


def with_engine_timings(
    turns: list[TurnResult], timings: Mapping[str, EngineTiming], time_scale: float
) -> list[TurnResult]:
    """Turns whose TTFT is in hardware seconds for every part of the path (bench/timings.py);
    turns without a timing keep the scaled figure."""
    out = []
    for t in turns:
        timing = timings.get(t.rid)
        if timing is None or t.ttft_scaled is None:
            out.append(t)
            continue
        out.append(replace(t, ttft=hardware_ttft(t.ttft_scaled, timing, time_scale)))
    return out


def summarize_turns(turns: list[TurnResult]) -> dict[str, Any]:
    later = [t for t in turns if t.turn >= 2 and t.ok and t.ttft is not None]
    eligible = [t for t in turns if t.eligible]
    by_turn: dict[int, list[float]] = {}
    for t in turns:
        if t.ok and t.ttft is not None:
            by_turn.setdefault(t.turn, []).append(t.ttft)
    return {
        "turns": len(turns),
        "errors": sum(1 for t in turns if not t.ok),
        "eligible": len(eligible),
        "hits": sum(1 for t in eligible if t.hit),
        "hit_ratio": ratio(sum(1 for t in eligible if t.hit), len(eligible)),
        "ttft_later_turns": summarize([t.ttft for t in later if t.ttft is not None]),
        "ttft_later_turns_scaled": summarize(
            [t.ttft_scaled for t in later if t.ttft_scaled is not None]
        ),
        "ttft_by_turn": {turn: summarize(v) for turn, v in sorted(by_turn.items())},
    }


def summary_markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"Checkpoint hits: {summary['hits']}/{summary['eligible']} eligible turns "
        f"({summary['hit_ratio']:.1%}); errors: {summary['errors']}",
        "",
        "| turn | TTFT p50 s | TTFT p95 s | n |",
        "|---|---|---|---|",
    ]
    for turn, stats in summary["ttft_by_turn"].items():
        lines.append(f"| {turn} | {stats['p50']:.2f} | {stats['p95']:.2f} | {stats['count']:.0f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench sessions", description=__doc__)
    p.add_argument("--url", required=True, help="OpenAI base URL, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--model", default="glm-5.3-flash")
    p.add_argument("--api-key", default=None)
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--base-tokens", type=int, default=30_000)
    p.add_argument("--growth-tokens", type=int, default=1_500)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--chars-per-token", type=float, default=4.0)
    p.add_argument("--track-interval", type=int, default=256)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument(
        "--think",
        type=float,
        default=0.0,
        help="mean hardware seconds between a reply and the next turn",
    )
    p.add_argument("--no-session-header", action="store_true")
    p.add_argument("--timeout", type=float, default=3600.0)
    p.add_argument("--out", type=Path, default=None)
    shape = p.add_argument_group("session shapes (--shape)")
    shape.add_argument("--shape", type=Path, default=None, help="replay this session shape")
    shape.add_argument("--scale", type=int, default=1, help="copies of each session")
    shape.add_argument(
        "--ramp", type=float, default=0.0, help="hardware seconds over which sessions start"
    )
    shape.add_argument("--seed", type=int, default=0, help="varies the sessions' start times")
    shape.add_argument(
        "--chat-only",
        action="store_true",
        help="send chat completions whatever the shape's API (routers that speak only that)",
    )
    shape.add_argument(
        "--sim-urls",
        default="",
        help="comma-separated simulator URLs: TTFT from their /sim/timings (hardware seconds)",
    )
    return p


def _main_shape(args: argparse.Namespace) -> int:
    if args.scale < 1:
        raise SystemExit("--scale must be at least 1")
    shape = load_shape(args.shape)
    cfg = ReplayConfig(
        url=args.url,
        model=args.model,
        time_scale=args.time_scale,
        track_interval=args.track_interval,
        copies=args.scale,
        ramp_s=args.ramp,
        seed=args.seed,
        chat_only=args.chat_only,
        chars_per_token=args.chars_per_token,
        api_key=args.api_key,
        timeout_s=args.timeout,
    )
    results = asyncio.run(replay(shape, cfg))
    sims = [url for url in args.sim_urls.split(",") if url]
    if sims:
        results = replay_with_timings(results, fetch_engine_timings(sims), args.time_scale)
    summary = summarize_replay(results)
    print(replay_markdown({str(args.shape.name): summary}))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sessions-shape.json").write_text(
            json.dumps({"summary": summary, "requests": [asdict(r) for r in results]}, indent=2)
        )
    return 0


def config_from_args(args: argparse.Namespace) -> SessionsConfig:
    return SessionsConfig(
        url=args.url,
        model=args.model,
        api_key=args.api_key,
        sessions=args.sessions,
        turns=args.turns,
        concurrency=args.concurrency,
        base_tokens=args.base_tokens,
        growth_tokens=args.growth_tokens,
        max_tokens=args.max_tokens,
        chars_per_token=args.chars_per_token,
        track_interval=args.track_interval,
        time_scale=args.time_scale,
        send_session_header=not args.no_session_header,
        timeout_s=args.timeout,
    )


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.shape is not None:
        return _main_shape(args)
    turns = asyncio.run(run_sessions(config_from_args(args)))
    summary = summarize_turns(turns)
    print(summary_markdown(summary))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sessions.json").write_text(
            json.dumps({"summary": summary, "turns": [asdict(t) for t in turns]}, indent=2)
        )
    return 0
