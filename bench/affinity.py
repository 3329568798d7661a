"""`python -m bench affinity`: checkpoint-aware placement against the baselines and smg.

An agentic workload (bench/sessions.py: a ~30k-token base prompt per session, growing every
turn, 6+ turns) runs through each router in front of fresh simulator replicas, all sessions at
once. Routers: the flashbox gateway with routing.policy flashbox, consistent_hash and
round_robin (the same gateway, only the policy differs), and the SGLang model gateway (`smg`,
sglang-router) with its cache_aware policy and its manual policy keyed by x-smg-routing-key,
which talks to the simulators' own /v1/chat/completions. Reported per router: the share of
eligible turns that hit their checkpoint, and TTFT p50/p95 of turns >= 2 in reference-hardware
seconds: the engine's modelled TTFT (GET /sim/timings, by the x-request-id each turn carries)
plus the wall time the rest of the path took (bench/sessions.py, with_engine_timings). Wall
TTFT divided by the time scale, which scales a router's milliseconds up with the engine's
time, is reported next to it.

Full size (3 replicas x 192 checkpoint slots, 16 running requests each, and as many sessions
as the session budget of gateway.routing.capacity: 176 per replica, 528 in all):
    python -m bench affinity --slots 192 --max-running 16

`--shape FILE` replays a session shape instead (main conversations, subagents, side requests
and compactions as real clients send them) through flashbox, the gateway of `--today-rev`,
round-robin and smg cache_aware: bench/affinity_shape.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import affinity_shape
from bench.affinity_shape import DEFAULT_TODAY_REV, SHAPE_ROUTERS, ShapeAffinityConfig
from bench.procs import start_sim
from bench.routers import evictions, router, routing_lines, sim_args, wait_ready
from bench.sessions import (
    SessionsConfig,
    TurnResult,
    fetch_engine_timings,
    run_sessions,
    summarize_turns,
    with_engine_timings,
)
from gateway.routing.capacity import budget_for
from gateway.settings import RoutingSettings

ROUTERS = ("flashbox", "consistent_hash", "round_robin", "smg:cache_aware", "smg:manual")


@dataclass(frozen=True)
class AffinityConfig:
    # Checkpoint slots of each replica (one entry per replica).
    slots: tuple[int, ...]
    max_running: int
    track_interval: int
    sessions: int
    turns: int
    base_tokens: int
    growth_tokens: int
    max_tokens: int
    time_scale: float
    routers: tuple[str, ...]
    think_s: float
    seed: int = 0
    # Hardware seconds over which sessions start (None: one mean pause, think_s).
    ramp_s: float | None = None
    # The engines' --schedule-policy (the simulator models fcfs and lpm).
    schedule_policy: str = "lpm"


def _sim_args(cfg: AffinityConfig, slots: int) -> list[str]:
    return sim_args(
        slots, cfg.track_interval, cfg.max_running, cfg.sessions * 2, cfg.schedule_policy
    )


def _headers_for(name: str) -> Callable[[int], Mapping[str, str]] | None:
    if name == "smg:manual":
        return lambda index: {"x-smg-routing-key": f"bench-session-{index}"}
    return None


def run_router(cfg: AffinityConfig, name: str) -> tuple[dict[str, Any], list[TurnResult], float]:
    sims = [
        start_sim(
            *_sim_args(cfg, slots),
            name=f"replica-{i}",
            time_scale=cfg.time_scale,
            as_launched=True,
        )
        for i, slots in enumerate(cfg.slots)
    ]
    try:
        with router(name, [s.url for s in sims]) as proc:
            wait_ready(proc)
            sessions_cfg = SessionsConfig(
                url=proc.url + "/v1",
                model="glm-5.3-flash",
                api_key=None,
                sessions=cfg.sessions,
                turns=cfg.turns,
                concurrency=cfg.sessions,
                base_tokens=cfg.base_tokens,
                growth_tokens=cfg.growth_tokens,
                max_tokens=cfg.max_tokens,
                chars_per_token=4.0,
                track_interval=cfg.track_interval,
                time_scale=cfg.time_scale,
                send_session_header=not name.startswith("smg"),
                timeout_s=3600.0,
                think_s=cfg.think_s,
                seed=cfg.seed,
                ramp_s=cfg.ramp_s,
            )
            started = time.perf_counter()
            turns = asyncio.run(run_sessions(sessions_cfg, _headers_for(name)))
            wall = time.perf_counter() - started
            timings = fetch_engine_timings([sim.url for sim in sims])
            turns = with_engine_timings(turns, timings, cfg.time_scale)
            evicted = {sim.url: evictions(sim) for sim in sims}
            router_log = proc.log()
    finally:
        for sim in sims:
            sim.stop()
    summary = summarize_turns(turns)
    summary["checkpoint_evictions"] = evicted
    summary["router_log"] = routing_lines(router_log)
    return summary, turns, wall


def run_all(cfg: AffinityConfig, out_dir: Path | None) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for name in cfg.routers:
        print(f"-- {name}", flush=True)
        summary, turns, wall = run_router(cfg, name)
        summary["wall_s"] = wall
        results[name] = summary
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            safe = name.replace(":", "-")
            (out_dir / f"{safe}.json").write_text(
                json.dumps({"summary": summary, "turns": [asdict(t) for t in turns]}, indent=2)
            )
    if out_dir is not None:
        (out_dir / "affinity.json").write_text(
            json.dumps({"config": asdict(cfg), "results": results}, indent=2)
        )
    return results


def markdown(cfg: AffinityConfig, results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| router | checkpoint hits (eligible turns) | TTFT p50 s, turns >= 2 | "
        "TTFT p95 s, turns >= 2 | wall TTFT / time scale, p50 / p95 s "
        "| checkpoint evictions | errors | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        ttft = r["ttft_later_turns"]
        scaled = r.get("ttft_later_turns_scaled") or {"p50": math.nan, "p95": math.nan}
        lines.append(
            f"| {name} | {r['hit_ratio']:.1%} ({r['hits']}/{r['eligible']}) | "
            f"{ttft['p50']:.1f} | {ttft['p95']:.1f} | {scaled['p50']:.1f} / {scaled['p95']:.1f} "
            f"| {sum(r['checkpoint_evictions'].values())} | {r['errors']} | {r['wall_s']:.0f} |"
        )
    lines.append("")
    lines.extend(_goals(results))
    return "\n".join(lines)


def _goals(results: dict[str, dict[str, Any]]) -> list[str]:
    fb = results.get("flashbox")
    if fb is None:
        return []
    out = []
    p50 = fb["ttft_later_turns"]["p50"]
    rr = results.get("round_robin")
    if rr is not None and p50 > 0:
        out.append(
            f"- TTFT p50 of turns >= 2, round-robin / flashbox: "
            f"{rr['ttft_later_turns']['p50'] / p50:.1f}x (goal >= 5x)."
        )
    smg = [(n, r) for n, r in results.items() if n.startswith("smg")]
    if smg:
        best_name, best = max(smg, key=lambda item: item[1]["hit_ratio"])
        out.append(
            f"- Best smg policy by hit ratio: {best_name} at {best['hit_ratio']:.1%} and TTFT "
            f"p50 {best['ttft_later_turns']['p50']:.1f} s, against flashbox's "
            f"{fb['hit_ratio']:.1%} and {p50:.1f} s."
        )
    out.append(f"- flashbox hit ratio {fb['hit_ratio']:.1%} (goal >= 99% while capacity exists).")
    log = fb.get("router_log", [])
    out.append(
        f"- flashbox placement log: {sum('spill:' in line for line in log)} spills, "
        f"{sum('over budget:' in line for line in log)} sessions placed over budget, "
        f"{sum('verified miss' in line for line in log)} verified misses."
    )
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench affinity", description=__doc__)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument(
        "--slots", default="48", help="checkpoint slots per replica, or one value per replica"
    )
    p.add_argument("--max-running", type=int, default=4)
    p.add_argument("--track-interval", type=int, default=256)
    p.add_argument(
        "--schedule-policy",
        choices=("fcfs", "lpm"),
        default="lpm",
        help="the engines' queue order (SGLang's --schedule-policy; the engine profiles set lpm)",
    )
    p.add_argument(
        "--sessions", type=int, default=0, help="default: the replicas' session budgets, summed"
    )
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--base-tokens", type=int, default=30_000)
    p.add_argument("--growth-tokens", type=int, default=1_500)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--time-scale", type=float, default=0.02)
    # Agentic sessions pause between turns while tools run or a person reads. With no pause,
    # every session is always queued and TTFT measures the queue, not the checkpoints. With
    # 400 s a replica keeps up once the cold first turns are done (hits' short suffixes are
    # prefilled together); the first turns still arrive faster than it can prefill them.
    p.add_argument(
        "--think",
        type=float,
        default=400.0,
        help="mean hardware seconds between turns of a session",
    )
    p.add_argument("--seed", type=int, default=0, help="varies pauses and start times")
    # With the default (sessions start within one mean pause), the cold first turns arrive
    # faster than the replicas can prefill them (44 x ~22 s per replica within 400 s), and the
    # second turns queue behind them: their TTFT p95 is that queue, the same for every router.
    # A ramp as long as the pool needs to prefill every first turn measures turns >= 2 at a
    # load the replicas sustain.
    p.add_argument(
        "--ramp",
        type=float,
        default=None,
        help="hardware seconds over which sessions start (default: --think)",
    )
    p.add_argument(
        "--routers",
        default=None,
        help=f"default: {','.join(ROUTERS)}; with --shape: {','.join(SHAPE_ROUTERS)}",
    )
    p.add_argument("--out", type=Path, default=None)
    # A session shape instead of the uniform sessions above (bench/affinity_shape.py).
    p.add_argument(
        "--shape",
        type=Path,
        default=None,
        help="replay this session shape (bench/shapes/*.json, or `python -m bench synth-shape`)",
    )
    p.add_argument("--scale", type=int, default=1, help="with --shape: copies of each session")
    p.add_argument(
        "--today-rev",
        default=DEFAULT_TODAY_REV,
        help="with --shape: the git revision whose gateway is the 'today' router",
    )
    return p


def session_capacity(slots: tuple[int, ...], max_running: int) -> int:
    """Sessions the pool holds without evictions (gateway.routing.capacity's budget)."""
    per_session = RoutingSettings().checkpoints_per_session
    return sum(budget_for(n, max_running, per_session) for n in slots)


def config_from_args(args: argparse.Namespace) -> AffinityConfig:
    slots = tuple(int(part) for part in str(args.slots).split(","))
    if len(slots) == 1:
        slots = slots * args.replicas
    sessions = args.sessions if args.sessions > 0 else session_capacity(slots, args.max_running)
    return AffinityConfig(
        slots=slots,
        max_running=args.max_running,
        track_interval=args.track_interval,
        sessions=sessions,
        turns=args.turns,
        base_tokens=args.base_tokens,
        growth_tokens=args.growth_tokens,
        max_tokens=args.max_tokens,
        time_scale=args.time_scale,
        routers=_routers(args.routers, ROUTERS),
        think_s=args.think,
        seed=args.seed,
        ramp_s=args.ramp,
        schedule_policy=args.schedule_policy,
    )


def _routers(given: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    return default if given is None else tuple(r for r in given.split(",") if r)


def shape_config_from_args(args: argparse.Namespace) -> ShapeAffinityConfig:
    slots = tuple(int(part) for part in str(args.slots).split(","))
    if len(slots) == 1:
        slots = slots * args.replicas
    if args.scale < 1:
        raise SystemExit("--scale must be at least 1")
    return ShapeAffinityConfig(
        shape=args.shape,
        slots=slots,
        max_running=args.max_running,
        track_interval=args.track_interval,
        time_scale=args.time_scale,
        routers=_routers(args.routers, SHAPE_ROUTERS),
        scale=args.scale,
        ramp_s=args.think if args.ramp is None else args.ramp,
        seed=args.seed,
        schedule_policy=args.schedule_policy,
        today_rev=args.today_rev,
    )


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.shape is not None:
        shape_cfg = shape_config_from_args(args)
        print(
            affinity_shape.report_markdown(shape_cfg, affinity_shape.run_all(shape_cfg, args.out))
        )
        return 0
    cfg = config_from_args(args)
    print(markdown(cfg, run_all(cfg, args.out)))
    return 0


def _scenario(title: str, cfg: AffinityConfig, results: dict[str, dict[str, Any]]) -> str:
    slots = "/".join(str(n) for n in cfg.slots)
    return "\n".join(
        [
            f"### {title}",
            "",
            f"{len(cfg.slots)} simulated replicas with {slots} checkpoint slots "
            f"({cfg.max_running} running requests each), {cfg.sessions} concurrent sessions "
            f"(the pool's session budget) x {cfg.turns} turns, ~{cfg.base_tokens // 1000}k-token "
            f"base prompt + {cfg.growth_tokens} tokens a turn, {cfg.max_tokens} output tokens, "
            f"{cfg.think_s:.0f} s mean pause between turns, sessions starting within the first "
            f"{cfg.think_s if cfg.ramp_s is None else cfg.ramp_s:.0f} s, seed {cfg.seed}, "
            f"time scale {cfg.time_scale}.",
            "",
            markdown(cfg, results),
        ]
    )


def report(out_dir: Path) -> str:
    """`make bench`: the issue's 3 x 192 slots and 16 running requests scaled down by 4
    (3 x 48 slots, 4 running, 132 sessions), all routers; then a pool of unequal replicas
    (48/48/24 slots), where knowing each replica's capacity matters."""
    even = config_from_args(build_parser().parse_args([]))
    uneven = config_from_args(
        build_parser().parse_args(
            [
                "--slots",
                "48,48,24",
                "--routers",
                "flashbox,consistent_hash,smg:cache_aware,smg:manual",
            ]
        )
    )
    return "\n".join(
        [
            "## Session affinity across replicas",
            "",
            "TTFT in reference-hardware seconds (wall / time scale); 2 shared CPU cores. Hits: "
            "eligible turns (>= 2) whose cached tokens cover the previous prompt rounded down to "
            "the track interval. Full size: `python -m bench affinity --slots 192 "
            "--max-running 16` (528 sessions).",
            "",
            _scenario("Equal replicas", even, run_all(even, out_dir / "equal")),
            "",
            _scenario("Unequal replicas", uneven, run_all(uneven, out_dir / "unequal")),
        ]
    )
