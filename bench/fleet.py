"""`python -m bench fleet`: two gateways sharing routing state through the store, next to one.

Hits. bench/sessions.py's agentic workload (as `python -m bench affinity` runs it: a ~30k-token
base prompt, growing every turn, pauses between turns) in front of fresh simulator replicas,
through:
- `one`: one gateway, in-process state (what `python -m bench affinity` calls flashbox);
- `alternate`: two gateways sharing a fresh redis-server (FLASHBOX_STATE_URL), each session's
  turns alternating between them (its first turn on gateway index % 2);
- `random`: the same two gateways, each turn sent to one of them at random (seeded).
Reported per mode: the share of eligible turns that hit their checkpoint (the simulators' cached
tokens cover the previous prompt), TTFT p50/p95 of turns >= 2 in hardware seconds
(bench/sessions.py: with_engine_timings), and the gateways' store errors and lost claims.

Store overhead. One stream (one request at a time): three gateways in front of the same
simulators: `plain` without FLASHBOX_STATE_URL, `shared` with it, and `shared_wait` with it and
`state.pinned_turns_wait` (a pinned turn waits for the store's fetch, as before the move
watch: gateway.routing.moves); short multi-turn sessions, one on each, their turns taking
turns between the three (all see the same engine load, and the box's drift hits all alike).
Reported: each one's wall-clock TTFT p50 (all turns, and turns >= 2, the pinned ones), the
differences to `plain`, and the store's round trips from the shared gateways'
flashbox_state_seconds.

Saturated host (`--cpu-burn`): the appliance's real host has no idle core (kt-kernel keeps every
physical core but the launcher's reserve busy with expert work), so each mode also runs with one
busy-looping process per core at normal priority beside it (`mode+burn`), in the same run.

    python -m bench fleet                       # 3 x 48 slots, 4 running, 132 sessions
    python -m bench fleet --modes alternate --overhead-sessions 0
    python -m bench fleet --cpu-burn --modes one,alternate --sessions 8 --turns 9
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.client import stream_chat
from bench.procs import Proc, RedisProc, start_gateway, start_redis, start_sim
from bench.sessions import (
    SessionsConfig,
    TurnResult,
    fetch_engine_timings,
    run_session,
    summarize_turns,
    with_engine_timings,
)
from bench.stats import summarize
from bench.workload import synthetic_text
from gateway.routing.capacity import budget_for
from gateway.settings import RoutingSettings

MODES = ("one", "alternate", "random")
# The store-overhead run's gateways with a store: pinned turns sent first, and waiting.
SHARED_GATEWAYS = ("shared", "shared_wait")

# The store-overhead run's simulators: the engine's share of TTFT is a few milliseconds.
OVERHEAD_TIME_SCALE = 0.001
# session index, turn (0-based) -> which gateway serves it
Chooser = Callable[[int, int], int]


@dataclass(frozen=True)
class FleetConfig:
    slots: tuple[int, ...]
    max_running: int
    track_interval: int
    sessions: int
    turns: int
    base_tokens: int
    growth_tokens: int
    max_tokens: int
    time_scale: float
    think_s: float
    seed: int
    modes: tuple[str, ...]
    # The store's round-trip bound for the shared gateways (None: the gateway's default).
    state_timeout_s: float | None
    # Store overhead at one stream: sessions (0: skip), turns each, base tokens.
    overhead_sessions: int
    overhead_turns: int
    overhead_base_tokens: int
    # Also run each mode with every core kept busy (`mode+burn`).
    cpu_burn: bool = False


BURN = "while True:\n    pass\n"


@contextmanager
def cpu_burn(processes: int | None = None) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every core busy at normal priority for the block, as kt-kernel's threads keep them."""
    count = processes or os.cpu_count() or 1
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(count)]
    try:
        yield burners
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()


def gateway_env(store: RedisProc | None, timeout_s: float | None) -> dict[str, str]:
    env = {
        "FLASHBOX_ROUTING__POLICY": "flashbox",
        "FLASHBOX_LIMITS__MAX_BODY_BYTES": str(64 * 1024 * 1024),
        "FLASHBOX_API_KEYS": "",
    }
    if store is not None:
        env["FLASHBOX_STATE_URL"] = store.url
        if timeout_s is not None:
            env["FLASHBOX_STATE__TIMEOUT_S"] = str(timeout_s)
    return env


def sim_args(slots: int, cfg: FleetConfig) -> list[str]:
    return [
        "--checkpoint-slots", str(slots),
        "--track-interval", str(cfg.track_interval),
        "--max-running-requests", str(cfg.max_running),
        # Every session at once: the default queue bound would refuse some.
        "--max-queued-requests", str(max(4096, cfg.sessions * 2)),
        "--schedule-policy", "lpm",
    ]  # fmt: skip


class SplitTransport(httpx.AsyncBaseTransport):
    """Sends each request to one of several gateways, chosen by its session (the index in
    bench/sessions.py's x-session-id, bench-session-N) and how many turns it sent before."""

    def __init__(self, ports: Sequence[int], choose: Chooser, limits: httpx.Limits) -> None:
        self._ports = list(ports)
        self._choose = choose
        self._turns: dict[str, int] = {}
        self._inner = httpx.AsyncHTTPTransport(limits=limits)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = request.headers.get("x-session-id", "")
        turn = self._turns.get(session, 0)
        self._turns[session] = turn + 1
        index = int(session.rsplit("-", 1)[-1]) if session else 0
        port = self._ports[self._choose(index, turn)]
        request.url = request.url.copy_with(port=port)
        request.headers["host"] = f"{request.url.host}:{port}"
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def drive(
    cfg: SessionsConfig, ports: Sequence[int], choose: Chooser, concurrency: int
) -> list[TurnResult]:
    """bench/sessions.py's sessions, each turn sent where `choose` says."""
    limits = httpx.Limits(max_connections=concurrency + 4)
    transport = SplitTransport(ports, choose, limits)
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(
        transport=transport, timeout=httpx.Timeout(cfg.timeout_s, connect=10.0)
    ) as client:

        async def one(i: int) -> list[TurnResult]:
            async with gate:
                return await run_session(client, cfg, i)

        nested = await asyncio.gather(*(one(i) for i in range(cfg.sessions)))
    return [turn for session in nested for turn in session]


def chooser(mode: str, seed: int) -> Chooser:
    if mode == "alternate":
        return lambda index, turn: (index + turn) % 2
    if mode == "random":
        draws: dict[tuple[int, int], int] = {}

        def pick(index: int, turn: int) -> int:
            if (index, turn) not in draws:
                draws[index, turn] = random.Random(f"{seed}-{index}-{turn}").randrange(2)
            return draws[index, turn]

        return pick
    return lambda index, turn: 0


@contextmanager
def sims_for(cfg: FleetConfig, time_scale: float) -> Iterator[list[Proc]]:
    with ExitStack() as stack:
        sims = []
        for i, slots in enumerate(cfg.slots):
            sim = start_sim(
                *sim_args(slots, cfg),
                name=f"replica-{i}",
                time_scale=time_scale,
                as_launched=True,
            )
            stack.callback(sim.stop)
            sims.append(sim)
        yield sims


def metric_values(proc: Proc, name: str) -> dict[str, float]:
    """Samples of one metric on a gateway's /metrics, by their label text."""
    text = httpx.get(proc.url + "/metrics", timeout=10.0).text
    found: dict[str, float] = {}
    for match in re.finditer(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE):
        found[match.group(1) or ""] = float(match.group(2))
    return found


def store_figures(gateways: Sequence[Proc]) -> dict[str, Any]:
    """What the gateways counted about the store: errors, claims by result, round trips."""
    out: dict[str, Any] = {"errors": 0.0, "errors_by_kind": {}, "claims": {}, "round_trips": {}}
    for proc in gateways:
        for labels, value in metric_values(proc, "flashbox_state_errors_total").items():
            kind = labels.split('"')[1] if '"' in labels else labels
            out["errors"] += value
            out["errors_by_kind"][kind] = out["errors_by_kind"].get(kind, 0.0) + value
        for labels, value in metric_values(proc, "flashbox_state_claims_total").items():
            result = labels.split('"')[1] if '"' in labels else labels
            out["claims"][result] = out["claims"].get(result, 0.0) + value
        sums = metric_values(proc, "flashbox_state_seconds_sum")
        counts = metric_values(proc, "flashbox_state_seconds_count")
        for labels, count in counts.items():
            op = labels.split('"')[1] if '"' in labels else labels
            total, n = out["round_trips"].get(op, (0.0, 0.0))
            out["round_trips"][op] = (total + sums.get(labels, 0.0), n + count)
    out["round_trips"] = {
        op: {"count": n, "mean_ms": 1000 * total / n if n else math.nan}
        for op, (total, n) in out["round_trips"].items()
    }
    return out


def sessions_config(cfg: FleetConfig, url: str) -> SessionsConfig:
    return SessionsConfig(
        url=url + "/v1",
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
        send_session_header=True,
        timeout_s=3600.0,
        think_s=cfg.think_s,
        seed=cfg.seed,
    )


def run_mode(cfg: FleetConfig, mode: str) -> tuple[dict[str, Any], list[TurnResult]]:
    with ExitStack() as stack:
        sims = stack.enter_context(sims_for(cfg, cfg.time_scale))
        urls = [s.url for s in sims]
        store = None
        if mode != "one":
            store = start_redis()
            stack.callback(store.stop)
        gateways = []
        for _ in range(1 if mode == "one" else 2):
            gateway = start_gateway(urls, env=gateway_env(store, cfg.state_timeout_s))
            stack.callback(gateway.stop)
            gateways.append(gateway)
        scfg = sessions_config(cfg, gateways[0].url)
        started = time.perf_counter()
        turns = asyncio.run(
            drive(scfg, [g.port for g in gateways], chooser(mode, cfg.seed), cfg.sessions)
        )
        wall = time.perf_counter() - started
        turns = with_engine_timings(turns, fetch_engine_timings(urls), cfg.time_scale)
        summary = summarize_turns(turns)
        summary["wall_s"] = wall
        summary["gateways"] = len(gateways)
        summary["store"] = store_figures(gateways) if store is not None else None
        placement = "\n".join(g.log() for g in gateways)
        summary["verified_misses_logged"] = placement.count("verified miss")
    return summary, turns


async def overhead_turns(
    cfg: FleetConfig, urls: Mapping[str, str]
) -> dict[str, list[tuple[int, float]]]:
    """One request at a time: sets of sessions, one on each gateway, their turns taking turns
    between the gateways (which goes first rotates too), so drift in the box's load hits all
    alike. Per gateway: (turn, wall-clock TTFT in ms) of each answered turn."""
    out: dict[str, list[tuple[int, float]]] = {name: [] for name in urls}
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
        for pair in range(max(1, cfg.overhead_sessions // 2)):
            base = synthetic_text(cfg.overhead_base_tokens * 4, seed=pair)
            talks: dict[str, list[dict[str, Any]]] = {
                name: [
                    {"role": "system", "content": f"overhead {name} {pair}. {base}"},
                    {"role": "user", "content": f"task {pair}"},
                ]
                for name in urls
            }
            names = list(urls)
            for turn in range(1, cfg.overhead_turns + 1):
                first = (pair + turn) % len(names)
                for name in names[first:] + names[:first]:
                    body = {"model": "glm-5.3-flash", "messages": talks[name], "max_tokens": 16}
                    headers = {"x-session-id": f"overhead-{name}-{pair}"}
                    record = await stream_chat(
                        client, urls[name] + "/v1/chat/completions", body, headers
                    )
                    if not record.ok or record.ttft is None:
                        continue
                    out[name].append((turn, record.ttft * 1000))
                    answer: dict[str, Any] = {
                        "role": "assistant",
                        "content": "".join(record.content),
                    }
                    if record.reasoning:
                        answer["reasoning_content"] = "".join(record.reasoning)
                    growth = synthetic_text(800, seed=pair * 1000 + turn)
                    talks[name] = [*talks[name], answer, {"role": "user", "content": growth}]
    return out


def run_overhead(cfg: FleetConfig) -> dict[str, Any]:
    """One stream, two gateways (plain, shared) in front of the same simulators."""
    with ExitStack() as stack:
        sims = stack.enter_context(sims_for(cfg, OVERHEAD_TIME_SCALE))
        urls = [s.url for s in sims]
        store = start_redis()
        stack.callback(store.stop)
        plain = start_gateway(urls, env=gateway_env(None, None))
        stack.callback(plain.stop)
        shared = start_gateway(urls, env=gateway_env(store, cfg.state_timeout_s))
        stack.callback(shared.stop)
        waiting = start_gateway(
            urls,
            env={
                **gateway_env(store, cfg.state_timeout_s),
                "FLASHBOX_STATE__PINNED_TURNS_WAIT": "true",
            },
        )
        stack.callback(waiting.stop)
        gateways = {"plain": plain.url, "shared": shared.url, "shared_wait": waiting.url}
        turns = asyncio.run(overhead_turns(cfg, gateways))
        figures = {"shared": store_figures([shared]), "shared_wait": store_figures([waiting])}
    asked = cfg.overhead_turns * len(gateways) * max(1, cfg.overhead_sessions // 2)
    answered = sum(len(v) for v in turns.values())
    out: dict[str, Any] = {"store": figures, "errors": asked - answered}
    for name, samples in turns.items():
        out[name] = {
            "all": summarize([ms for _, ms in samples]),
            "later": summarize([ms for turn, ms in samples if turn >= 2]),
        }
    for name in SHARED_GATEWAYS:
        out[f"added_p50_ms_{name}"] = out[name]["all"]["p50"] - out["plain"]["all"]["p50"]
        out[f"added_p50_later_ms_{name}"] = out[name]["later"]["p50"] - out["plain"]["later"]["p50"]
    return out


def markdown(results: Mapping[str, dict[str, Any]], overhead: dict[str, Any] | None) -> str:
    lines = [
        "| mode | gateways | checkpoint hits (eligible turns) | TTFT p50 / p95 s, turns >= 2 "
        "| errors | store errors | claims won / same / adopted / unsent | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in results.items():
        ttft = r["ttft_later_turns"]
        store = r["store"]
        claims = (
            ""
            if store is None
            else " / ".join(
                f"{store['claims'].get(k, 0):.0f}" for k in ("won", "same", "adopted", "unsent")
            )
        )
        errors = "" if store is None else f"{store['errors']:.0f}"
        lines.append(
            f"| {mode} | {r['gateways']} | {r['hit_ratio']:.1%} ({r['hits']}/{r['eligible']}) "
            f"| {ttft['p50']:.1f} / {ttft['p95']:.1f} | {r['errors']} | {errors} | {claims} "
            f"| {r['wall_s']:.0f} |"
        )
    one = results.get("one")
    if one is not None:
        for mode in ("alternate", "random", "alternate+burn", "random+burn", "one+burn"):
            if mode in results:
                gap = 100 * (results[mode]["hit_ratio"] - one["hit_ratio"])
                lines.append(
                    f"\n- {mode}: hit ratio {gap:+.1f} points against one idle gateway "
                    "(goal: within 0.5)."
                )
    if overhead is not None:
        lines += ["", overhead_markdown(overhead)]
    return "\n".join(lines)


def overhead_markdown(o: dict[str, Any]) -> str:
    lines = [
        "| gateway, 1 stream | TTFT p50 ms | p95 ms | TTFT p50 ms, turns >= 2 | requests |",
        "|---|---|---|---|---|",
    ]
    for name in ("plain", *SHARED_GATEWAYS):
        every, later = o[name]["all"], o[name]["later"]
        lines.append(
            f"| {name} | {every['p50']:.2f} | {every['p95']:.2f} | {later['p50']:.2f} "
            f"| {every['count']:.0f} |"
        )
    lines.append("")
    for name in SHARED_GATEWAYS:
        store = o["store"][name]
        trips = ", ".join(
            f"{op} {v['mean_ms']:.3f} ms mean x {v['count']:.0f}"
            for op, v in sorted(store["round_trips"].items())
        )
        lines += [
            f"- {name}: the store's added TTFT p50 {o[f'added_p50_ms_{name}']:+.2f} ms (all "
            f"turns), {o[f'added_p50_later_ms_{name}']:+.2f} ms (turns >= 2) (goal: at most "
            f"0.5 ms); round trips ({trips}); store errors {store['errors']:.0f}.",
        ]
    lines.append(f"- Requests that failed: {o['errors']}.")
    return "\n".join(lines)


def run_all(cfg: FleetConfig, out_dir: Path | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    results: dict[str, Any] = {}
    runs = [(mode, False) for mode in cfg.modes]
    if cfg.cpu_burn:
        runs += [(mode, True) for mode in cfg.modes]
    for mode, burn in runs:
        name = f"{mode}+burn" if burn else mode
        print(f"-- {name}", flush=True)
        with ExitStack() as burning:
            if burn:
                burning.enter_context(cpu_burn())
            summary, turns = run_mode(cfg, mode)
        results[name] = summary
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"{name}.json").write_text(
                json.dumps({"summary": summary, "turns": [asdict(t) for t in turns]}, indent=2)
            )
    overhead = None
    if cfg.overhead_sessions > 0:
        print("-- store overhead, 1 stream", flush=True)
        overhead = run_overhead(cfg)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "fleet.json").write_text(
            json.dumps({"config": asdict(cfg), "results": results, "overhead": overhead}, indent=2)
        )
    return results, overhead


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench fleet", description=__doc__)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--slots", default="48", help="checkpoint slots per replica, or one each")
    p.add_argument("--max-running", type=int, default=4)
    p.add_argument("--track-interval", type=int, default=256)
    p.add_argument("--sessions", type=int, default=0, help="default: the pool's session budget")
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--base-tokens", type=int, default=30_000)
    p.add_argument("--growth-tokens", type=int, default=1_500)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--time-scale", type=float, default=0.02)
    p.add_argument("--think", type=float, default=400.0, help="mean hardware s between turns")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--modes", default=",".join(MODES), help=f"some of {','.join(MODES)}")
    p.add_argument(
        "--state-timeout",
        type=float,
        default=None,
        help="the shared gateways' state.timeout_s (default: the gateway's, 5 ms)",
    )
    p.add_argument("--overhead-sessions", type=int, default=60, help="0: skip the 1-stream run")
    p.add_argument("--overhead-turns", type=int, default=8)
    p.add_argument("--overhead-base-tokens", type=int, default=2_000)
    p.add_argument(
        "--cpu-burn",
        action="store_true",
        help="also run each mode with one busy-looping process per core (mode+burn)",
    )
    p.add_argument("--out", type=Path, default=None)
    return p


def config_from_args(args: argparse.Namespace) -> FleetConfig:
    slots = tuple(int(part) for part in str(args.slots).split(","))
    if len(slots) == 1:
        slots = slots * args.replicas
    per_session = RoutingSettings().checkpoints_per_session
    capacity = sum(budget_for(n, args.max_running, per_session) for n in slots)
    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown modes {sorted(unknown)}; choose from {', '.join(MODES)}")
    return FleetConfig(
        slots=slots,
        max_running=args.max_running,
        track_interval=args.track_interval,
        sessions=args.sessions if args.sessions > 0 else capacity,
        turns=args.turns,
        base_tokens=args.base_tokens,
        growth_tokens=args.growth_tokens,
        max_tokens=args.max_tokens,
        time_scale=args.time_scale,
        think_s=args.think,
        seed=args.seed,
        modes=modes,
        state_timeout_s=args.state_timeout,
        overhead_sessions=args.overhead_sessions,
        overhead_turns=args.overhead_turns,
        overhead_base_tokens=args.overhead_base_tokens,
        cpu_burn=args.cpu_burn,
    )


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    print(markdown(*run_all(config_from_args(args), args.out)))
    return 0


def report(out_dir: Path) -> str:
    """`make bench`: the affinity benchmark's equal pool (3 x 48 slots, 4 running, 132
    sessions), one gateway against two sharing the store; then the store's overhead."""
    cfg = config_from_args(build_parser().parse_args([]))
    results, overhead = run_all(cfg, out_dir)
    return "\n".join(
        [
            "## Two gateways sharing routing state",
            "",
            f"{len(cfg.slots)} simulated replicas x {cfg.slots[0]} checkpoint slots, "
            f"{cfg.sessions} sessions x {cfg.turns} turns, time scale {cfg.time_scale}; "
            "`python -m bench fleet`.",
            "",
            markdown(results, overhead),
        ]
    )
