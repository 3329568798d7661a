"""`python -m bench tracing`: what OpenTelemetry tracing costs the gateway, off against on, in
one run.

One simulator serves three gateway processes, the same streaming chat load at each level:
  off      tracing off (the default: no span is built)
  on       tracing on, every request sampled, spans exported over OTLP/HTTP (protobuf) to a
           receiver process (tests/support/otlp_receiver.py), the export thread's CPU included
  on-grpc  the same, exported over OTLP/gRPC to the same receiver
  unsampled tracing on, the sampler dropping every trace (OTEL_TRACES_SAMPLER=always_off): what
           a request pays for a trace id and the traceparent sent to the engine alone
Each level runs `--reps` rounds, the targets in a rotated order, samples pooled (as
bench/overhead.py does, whose machinery this reuses). Per target and level: client TTFT p50,
the hop's TTFT p50 with the engine's own time taken out (client TTFT minus the simulator's
arrival-to-first-token: what the network and the gateway cost), and the gateway process's CPU
per request; then on and unsampled against off, as differences (ms) and ratios, against the
goals: under 0.2 ms more TTFT p50 and under 10% more gateway CPU per request with tracing on.

The gateway's CPU is the sum of its threads' run time from /proc/<pid>/task/*/schedstat
(nanoseconds; psutil's user + system time counts 10 ms ticks, too coarse for a 10% difference
over a few hundred requests), psutil's where there is no schedstat. The receiver runs as a sink
(`--sink`: exports counted, not decoded) so that its CPU does not compete with the gateways on
a small machine; the run checks that every traced target's exports arrived.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from bench.overhead import LevelResult, Target, _cpu_seconds, measure
from bench.procs import Proc, free_port, start_gateway, start_process, start_sim
from bench.stats import ratio

TARGETS = ("off", "on", "on-grpc", "unsampled")
GOAL_TTFT_MS = 0.2
GOAL_CPU_RATIO = 1.10
# Exported within the measured window: the export thread's CPU is part of what tracing costs.
EXPORT_DELAY_MS = "200"


@dataclass(frozen=True)
class Config:
    levels: tuple[int, ...] = (1, 8)
    requests_per_stream: int = 16
    min_requests: int = 120
    reasoning_tokens: int = 16
    content_tokens: int = 48
    time_scale: float = 0.001
    warmup: int = 8
    reps: int = 3


def _cpu(proc: Proc | None) -> float | None:
    """The process's CPU seconds: its threads' schedstat run time, else psutil's ticks."""
    if proc is None:
        return None
    pid = proc.popen.pid
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _cpu_seconds(proc)
    return total / 1e9


@contextmanager
def _stack(config: Config) -> Iterator[tuple[dict[str, Target], str, str]]:
    sim_args = ["--reasoning-tokens", str(config.reasoning_tokens)]
    sim_args += ["--content-tokens", str(config.content_tokens)]
    sim = start_sim(*sim_args, name="bench", time_scale=config.time_scale, as_launched=True)
    procs: list[Proc] = [sim]
    try:
        http, grpc, query = free_port(), free_port(), free_port()
        receiver = start_process(
            "tests.support.otlp_receiver",
            [
                *("--host", "127.0.0.1", "--grpc-port", str(grpc)),
                *("--http-port", str(http), "--query-port", str(query)),
                "--sink",
            ],
            port=http,
            health_path="/health",
        )
        procs.append(receiver)
        exporting = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{http}/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": EXPORT_DELAY_MS,
        }
        envs = {
            "off": {"OTEL_SDK_DISABLED": "true"},
            "on": exporting,
            "on-grpc": {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{grpc}",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
                "OTEL_BSP_SCHEDULE_DELAY": EXPORT_DELAY_MS,
            },
            "unsampled": {**exporting, "OTEL_TRACES_SAMPLER": "always_off"},
        }
        targets: dict[str, Target] = {}
        for name in TARGETS:
            gateway = start_gateway([sim.url], env=envs[name])
            procs.append(gateway)
            targets[name] = Target(gateway.url + "/v1/chat/completions", gateway)
        yield targets, sim.url, receiver.url
    finally:
        for proc in reversed(procs):
            proc.stop()


def run(config: Config) -> list[LevelResult]:
    with _stack(config) as (targets, sim_url, receiver_url):
        results = measure(
            targets,
            sim_url,
            config,
            lambda r: (
                f"ttft p50 {r.ttft_p50_ms:.2f} ms hop p50 {r.network_p50_ms:.2f} ms "
                f"cpu/request {r.cpu_ms_per_request:.2f} ms"
            ),
            _cpu,
        )
        # The traced targets' spans went out (the sink counts exports by protocol).
        counted = httpx.get(receiver_url + "/stats", timeout=5).json()
        for via in ("http", "grpc"):
            if counted[via]["exports"] == 0:
                raise RuntimeError(f"no OTLP/{via} export reached the receiver: {counted}")
        print(f"received: {counted}", flush=True)
    return results


def table(results: Sequence[LevelResult]) -> str:
    off = {r.concurrency: r for r in results if r.target == "off"}
    lines = [
        "| target | streams | ok | TTFT p50 ms | hop TTFT p50 ms | hop added vs off ms "
        "| CPU ms/request | CPU vs off | goals |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        base = off[r.concurrency]
        added = r.network_p50_ms - base.network_p50_ms
        cpu = ratio(r.cpu_ms_per_request, base.cpu_ms_per_request)
        goals = ""
        if r.target.startswith("on"):
            ttft_ok = added < GOAL_TTFT_MS
            cpu_ok = cpu < GOAL_CPU_RATIO
            goals = f"TTFT {'met' if ttft_ok else 'missed'}, CPU {'met' if cpu_ok else 'missed'}"
        lines.append(
            f"| {r.target} | {r.concurrency} | {r.ok}/{r.requests} | {r.ttft_p50_ms:.2f} "
            f"| {r.network_p50_ms:.2f} | {added:+.3f} | {r.cpu_ms_per_request:.3f} "
            f"| {cpu:.3f}x | {goals} |"
        )
    return "\n".join(lines)


def _parse(argv: list[str]) -> tuple[Config, Path | None]:
    parser = argparse.ArgumentParser(prog="python -m bench tracing", description=__doc__)
    defaults = Config()
    parser.add_argument("--levels", type=int, nargs="+", default=list(defaults.levels))
    parser.add_argument("--requests-per-stream", type=int, default=defaults.requests_per_stream)
    parser.add_argument("--min-requests", type=int, default=defaults.min_requests)
    parser.add_argument("--reasoning-tokens", type=int, default=defaults.reasoning_tokens)
    parser.add_argument("--content-tokens", type=int, default=defaults.content_tokens)
    parser.add_argument("--time-scale", type=float, default=defaults.time_scale)
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument("--reps", type=int, default=defaults.reps)
    parser.add_argument("--out", type=Path, default=None, help="write results JSON here")
    args = parser.parse_args(argv)
    config = Config(
        levels=tuple(args.levels),
        requests_per_stream=args.requests_per_stream,
        min_requests=args.min_requests,
        reasoning_tokens=args.reasoning_tokens,
        content_tokens=args.content_tokens,
        time_scale=args.time_scale,
        warmup=args.warmup,
        reps=max(1, args.reps),
    )
    return config, args.out


def main(argv: list[str]) -> int:
    config, out = _parse(argv)
    results = run(config)
    print(table(results))
    if out is not None:
        out.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    config = Config()
    results = run(config)
    (out_dir / "tracing.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    return (
        "## Tracing overhead (off vs on vs sampled out, same simulator)\n\n"
        f"{table(results)}\n\n"
        "hop TTFT: client TTFT minus the simulator's own arrival-to-first-token; "
        f"goals with tracing on: under {GOAL_TTFT_MS} ms added hop TTFT p50 and under "
        f"{(GOAL_CPU_RATIO - 1) * 100:.0f}% more gateway CPU per request. {config.reps} "
        "interleaved rounds per level, samples pooled.\n"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
