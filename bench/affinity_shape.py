"""`python -m bench affinity --shape FILE`: a session shape through each router, in one run.

The shape (bench/shapes.py: recorded from a CLI, or bench/shape_synth.py's synthetic Claude
Code sessions) is replayed (bench/replay.py), `--scale` copies of each session starting spread
over `--ramp` seconds, through each router in front of fresh simulator replicas: the gateway
of the working tree (`flashbox`), the gateway as it was (`today`: `--today-rev`, run from a
temporary git worktree, in front of this tree's simulators), round-robin, and smg's best policy
(cache_aware), which gets chat completions of the same token shape. Reported per router and
lineage kind (bench/replay_report.py): checkpoint hits of eligible turns, misses of main turns
after a side request, TTFT p50/p95 of turns >= 2 in hardware seconds (the engine's modelled
TTFT, bench/timings.py), and the first-request TTFT of sessions whose head another session had
already prefilled ("head reuse").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.procs import start_sim
from bench.replay import ReplayConfig, RequestResult, replay, with_engine_timings
from bench.replay_report import goals, markdown, summarize_replay
from bench.routers import (
    TODAY,
    evictions,
    router,
    routing_lines,
    sim_args,
    smg_manual_key,
    today_worktree,
    wait_ready,
)
from bench.shapes import Shape, load_shape
from bench.timings import fetch_engine_timings
from gateway.settings import RoutingSettings

SHAPE_ROUTERS = ("flashbox", TODAY, "round_robin", "smg:cache_aware")
# The gateway before lineage tracking and head checkpoints (issue 22).
DEFAULT_TODAY_REV = "90a9d53"
# The gateways pass custom_params on, so the simulator answers in the recorded sizes.
STEER_ENV = {"FLASHBOX_UPSTREAM__FORWARD_CUSTOM_PARAMS": "true"}


def gateway_env(name: str, time_scale: float) -> dict[str, str]:
    """STEER_ENV, and the gateway's idle times at the simulators' scale. A lineage or a head
    that has been idle for an hour of the reference host's time is idle for 72 s of wall time
    at a time scale of 0.02; unscaled, nothing would ever expire within a run, and every
    finished subagent and side request would hold its replica's budget to the end."""
    routing = RoutingSettings()
    env = {
        **STEER_ENV,
        "FLASHBOX_ROUTING__PIN_IDLE_TTL_S": str(routing.pin_idle_ttl_s * time_scale),
    }
    if name != TODAY:  # the baseline's settings have no head table (and refuse unknown keys)
        env["FLASHBOX_ROUTING__HEAD_IDLE_TTL_S"] = str(routing.head_idle_ttl_s * time_scale)
        # The head warmer looks for idle replicas as often in the engines' time as unscaled.
        env["FLASHBOX_ROUTING__HEAD_WARM_CHECK_S"] = str(routing.head_warm_check_s * time_scale)
    return env


@dataclass(frozen=True)
class ShapeAffinityConfig:
    shape: Path
    slots: tuple[int, ...]
    max_running: int
    track_interval: int
    time_scale: float
    routers: tuple[str, ...]
    scale: int  # copies of each session
    ramp_s: float  # sessions start spread over this many hardware seconds
    seed: int
    schedule_policy: str
    today_rev: str
    timeout_s: float = 3600.0


def run_router(
    cfg: ShapeAffinityConfig, shape: Shape, name: str, today_root: Path | None
) -> tuple[dict[str, Any], list[RequestResult], float]:
    total = sum(len(s.requests) for s in shape.sessions) * cfg.scale
    args = [
        sim_args(slots, cfg.track_interval, cfg.max_running, total, cfg.schedule_policy)
        for slots in cfg.slots
    ]
    sims = [
        start_sim(*a, name=f"replica-{i}", time_scale=cfg.time_scale, as_launched=True)
        for i, a in enumerate(args)
    ]
    try:
        urls = [s.url for s in sims]
        env = gateway_env(name, cfg.time_scale)
        with router(name, urls, today_root=today_root, env=env) as proc:
            wait_ready(proc)
            replay_cfg = ReplayConfig(
                url=proc.url + "/v1",
                model="glm-5.3-flash",
                time_scale=cfg.time_scale,
                track_interval=cfg.track_interval,
                copies=cfg.scale,
                ramp_s=cfg.ramp_s,
                seed=cfg.seed,
                chat_only=name.startswith("smg"),
                timeout_s=cfg.timeout_s,
            )
            started = time.perf_counter()
            results = asyncio.run(replay(shape, replay_cfg, smg_manual_key(name)))
            wall = time.perf_counter() - started
            timings = fetch_engine_timings(urls)
            results = with_engine_timings(results, timings, cfg.time_scale)
            evicted = {sim.url: evictions(sim) for sim in sims}
            router_log = proc.log()
    finally:
        for sim in sims:
            sim.stop()
    summary = summarize_replay(results)
    summary["checkpoint_evictions"] = evicted
    summary["router_log"] = routing_lines(router_log)
    summary["wall_s"] = wall
    return summary, results, wall


@contextlib.contextmanager
def _baseline(cfg: ShapeAffinityConfig) -> Iterator[Path | None]:
    if TODAY not in cfg.routers:
        yield None
        return
    with today_worktree(cfg.today_rev) as root:
        yield root


def run_all(cfg: ShapeAffinityConfig, out_dir: Path | None) -> dict[str, dict[str, Any]]:
    shape = load_shape(cfg.shape)
    results: dict[str, dict[str, Any]] = {}
    with _baseline(cfg) as today_root:
        for name in cfg.routers:
            print(f"-- {name}", flush=True)
            summary, requests, _ = run_router(cfg, shape, name, today_root)
            results[name] = summary
            if out_dir is not None:
                out_dir.mkdir(parents=True, exist_ok=True)
                (out_dir / f"{name.replace(':', '-')}.json").write_text(
                    json.dumps(
                        {"summary": summary, "requests": [asdict(r) for r in requests]}, indent=2
                    )
                )
    if out_dir is not None:
        config = {**asdict(cfg), "shape": str(cfg.shape)}
        (out_dir / "affinity-shape.json").write_text(
            json.dumps({"config": config, "results": results}, indent=2)
        )
    return results


def report_markdown(cfg: ShapeAffinityConfig, results: dict[str, dict[str, Any]]) -> str:
    shape = load_shape(cfg.shape)
    sessions = len(shape.sessions) * cfg.scale
    requests = sum(len(s.requests) for s in shape.sessions) * cfg.scale
    slots = "/".join(str(n) for n in cfg.slots)
    lines = [
        f"Shape {cfg.shape.name} ({shape.client} {shape.client_version}, {shape.api}): "
        f"{sessions} sessions ({cfg.scale} x {len(shape.sessions)}), {requests} requests, "
        f"starting within {cfg.ramp_s:.0f} s; {len(cfg.slots)} replicas with {slots} "
        f"checkpoint slots, {cfg.max_running} running each, --schedule-policy "
        f"{cfg.schedule_policy}, time scale {cfg.time_scale}, seed {cfg.seed}; "
        f"today = {cfg.today_rev}. TTFT in hardware seconds.",
        "",
        markdown(results, {name: r["wall_s"] for name, r in results.items()}),
        "",
        *goals(results, TODAY),
    ]
    for name, r in results.items():
        log = r["router_log"]
        lines.append(
            f"- {name}: {sum(r['checkpoint_evictions'].values())} checkpoint evictions; "
            f"placement log: {sum('spill:' in line for line in log)} spills, "
            f"{sum('over budget:' in line for line in log)} over budget, "
            f"{sum('verified miss' in line for line in log)} verified misses, "
            f"{sum('warmed on' in line for line in log)} heads warmed."
        )
        if r["error_samples"]:
            lines.append(f"  errors, first {len(r['error_samples'])}: {r['error_samples']}")
    return "\n".join(lines)
