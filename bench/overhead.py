"""`python -m bench overhead`: what the gateway adds on top of the engine, next to SGLang's router.

One simulator (a near-trivial upstream at a small time scale) serves three targets, with the
same streaming load at each concurrency level, in one run:
  direct   the simulator's own /v1/chat/completions
  gateway  flashbox's gateway -> the simulator's /generate (render + parse on)
  messages the same gateway process's Anthropic Messages face (POST /v1/messages, the same
           prompts and output lengths)
  responses the same gateway process's OpenAI Responses face (POST /v1/responses, the same
           prompt as `input`, the same output lengths); `--faces` picks the gateway's faces
           (default all three)
  smg      SGLang's model gateway (sglang-router) -> the simulator's /v1/chat/completions
  pipe     with --floor: bench.pipe, a Python TCP byte pipe -> the same (the floor of a hop)
Each level runs `--reps` rounds (default 3); a round runs every target once, in a rotated
order, and each target's samples are pooled over the rounds, so a slow spell of the shared
machine falls on all of them. Per target and level: client-side TTFT p50/p99, what the hop
adds over direct (ms and ratio), and the hop process's own CPU time per request and per
relayed token (psutil), which is steadier than wall time on a shared machine.

What the hop adds is reported two ways. "added" is the difference of the client-side TTFT
percentiles. "hop-added" takes the engine out first: every request carries an x-request-id,
the simulator reports when each rid arrived and when its first token was made
(GET /sim/timings), and client TTFT minus that engine time is what the network and the
hops cost; hop-added is that cost's p50/p99 through the hop minus the same direct. The
engine's own share moves with its modelled clock (a prefill step that starts a little later
ends at the next step boundary), by more than a router adds, so only hop-added can tell a
millisecond. `--profile` also runs the gateway under cProfile and prints where its time goes
(per face).

With the OpenAI face and another measured, a second table per other face puts it next to the
OpenAI face per level: added and hop-added TTFT p50 and gateway CPU per relayed token, with
that face minus OpenAI (ms) and that face / OpenAI, and the goals checked at 1 stream.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import math
import pstats
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx
import psutil  # type: ignore[import-untyped]

from bench.client import StreamRecord, stream_chat, stream_messages, stream_responses
from bench.procs import Proc, free_port, start_gateway, start_process, start_sim
from bench.sessions import fetch_engine_timings
from bench.stats import percentile, ratio

MODEL = "glm-5.3-flash"
DEFAULT_LEVELS = (1, 8, 32)

Face = Literal["openai", "anthropic", "responses"]
FACES: tuple[Face, ...] = ("openai", "anthropic", "responses")
# The gateway's target name per face; "gateway" is the OpenAI face, as before faces existed.
FACE_TARGETS: dict[Face, str] = {
    "openai": "gateway",
    "anthropic": "messages",
    "responses": "responses",
}
# How the tables name each face.
FACE_LABELS: dict[Face, str] = {
    "openai": "OpenAI",
    "anthropic": "Messages",
    "responses": "Responses",
}
_FACE_PATHS: dict[Face, str] = {
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
}
_Recorder = Callable[
    [httpx.AsyncClient, str, Mapping[str, Any], Mapping[str, str] | None], Awaitable[StreamRecord]
]
_RECORDERS: dict[Face, _Recorder] = {
    "openai": stream_chat,
    "anthropic": stream_messages,
    "responses": stream_responses,
}


@dataclass(frozen=True)
class Config:
    levels: tuple[int, ...]
    requests_per_stream: int
    min_requests: int
    reasoning_tokens: int
    content_tokens: int
    time_scale: float
    with_smg: bool
    profile: bool
    warmup: int
    # Also measure bench.pipe, a TCP byte pipe: the floor of any Python hop.
    floor: bool = False
    # Rounds per level; in each the targets run one after another, in a rotated order, and
    # their samples are pooled: a slow spell of the shared machine lands on every target.
    reps: int = 3
    # The gateway's API faces to measure, each a target of the same gateway process.
    faces: tuple[Face, ...] = FACES


@dataclass(frozen=True)
class Target:
    url: str
    # The hop's process, whose CPU time is measured; None for direct.
    proc: Proc | None
    face: Face = "openai"


@dataclass
class LevelResult:
    target: str
    concurrency: int
    requests: int
    ok: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    tokens: int
    wall_s: float
    cpu_s: float | None
    # Client TTFT minus the engine's own (arrival to first token, from /sim/timings), ms.
    network_p50_ms: float = math.nan
    network_p99_ms: float = math.nan
    engine_ttft_p50_ms: float = math.nan

    @property
    def cpu_ms_per_request(self) -> float:
        return math.nan if self.cpu_s is None else ratio(self.cpu_s * 1000, self.ok)

    @property
    def cpu_us_per_token(self) -> float:
        return math.nan if self.cpu_s is None else ratio(self.cpu_s * 1e6, self.tokens)

    @property
    def tokens_per_cpu_s(self) -> float:
        return math.nan if self.cpu_s is None else ratio(self.tokens, self.cpu_s)


def _cpu_seconds(proc: Proc | None) -> float | None:
    if proc is None:
        return None
    times = psutil.Process(proc.popen.pid).cpu_times()
    return float(times.user + times.system)


def _body(face: Face = "openai") -> dict[str, Any]:
    # A unique prompt per request: no target gets a cache hit the others do not. The same body
    # is a chat completion and a Messages request (model, max_tokens, messages); a Responses
    # request sends the same prompt as its input. Each recorder adds its own `stream` fields.
    prompt = f"Benchmark request {uuid.uuid4().hex}: say something short."
    if face == "responses":
        return {"model": MODEL, "input": prompt, "max_output_tokens": 4096}
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 4096}


async def _run_level(
    url: str, concurrency: int, total: int, face: Face = "openai"
) -> tuple[list[tuple[str, StreamRecord]], float]:
    """`total` streams, `concurrency` at a time; each record with the x-request-id it sent."""
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency)
    recorder = _RECORDERS[face]
    async with httpx.AsyncClient(limits=limits, timeout=120.0) as client:
        remaining = total
        records: list[tuple[str, StreamRecord]] = []

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                rid = f"bench-{uuid.uuid4().hex}"
                headers = {"x-request-id": rid}
                records.append((rid, await recorder(client, url, _body(face), headers)))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return records, time.perf_counter() - started


@dataclass
class _Samples:
    records: list[StreamRecord]
    wall_s: float = 0.0
    cpu_s: float | None = 0.0
    # Per request with an engine timing: client TTFT minus engine TTFT, and engine TTFT (s).
    network_s: list[float] = field(default_factory=list)
    engine_s: list[float] = field(default_factory=list)


def _sample(
    target: Target,
    sim_url: str,
    concurrency: int,
    total: int,
    warmup: int,
    into: _Samples,
    cpu: Callable[[Proc | None], float | None] = _cpu_seconds,
) -> None:
    """One round of `total` requests at `concurrency`, after a warm-up; the hop's CPU read by
    `cpu` (a suite may read it more finely)."""
    url, proc, face = target.url, target.proc, target.face
    asyncio.run(_run_level(url, min(concurrency, warmup), warmup, face))
    cpu_before = cpu(proc)
    records, wall = asyncio.run(_run_level(url, concurrency, total, face))
    cpu_after = cpu(proc)
    engine = fetch_engine_timings([sim_url])
    for rid, record in records:
        into.records.append(record)
        timing = engine.get(rid)
        if record.ok and record.ttft is not None and timing is not None:
            into.network_s.append(record.ttft - timing.wall_ttft_s)
            into.engine_s.append(timing.wall_ttft_s)
    into.wall_s += wall
    if into.cpu_s is not None and cpu_before is not None and cpu_after is not None:
        into.cpu_s += cpu_after - cpu_before
    else:
        into.cpu_s = None


def _result(target: str, concurrency: int, samples: _Samples) -> LevelResult:
    records = samples.records
    good = [r for r in records if r.ok and r.ttft is not None]
    ttfts = [r.ttft * 1000 for r in good if r.ttft is not None]
    return LevelResult(
        target=target,
        concurrency=concurrency,
        requests=len(records),
        ok=len(good),
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p99_ms=percentile(ttfts, 99),
        tokens=sum(r.completion_tokens for r in good),
        wall_s=samples.wall_s,
        cpu_s=samples.cpu_s,
        network_p50_ms=percentile([x * 1000 for x in samples.network_s], 50),
        network_p99_ms=percentile([x * 1000 for x in samples.network_s], 99),
        engine_ttft_p50_ms=percentile([x * 1000 for x in samples.engine_s], 50),
    )


def _start_smg(sim: Proc) -> Proc | None:
    args = ["--worker-urls", sim.url, "--host", "127.0.0.1", "--port", "{port}"]
    args += ["--log-level", "warn", "--policy", "round_robin"]
    try:
        return start_process("sglang_router.launch_router", args, ready_timeout=60.0)
    except (RuntimeError, OSError) as exc:
        print(f"smg not available: {exc}")
        return None


@contextmanager
def _stack(config: Config, profile_out: Path | None) -> Iterator[tuple[dict[str, Target], str]]:
    """The targets by name and the simulator's base URL."""
    sim_args = ["--reasoning-tokens", str(config.reasoning_tokens)]
    sim_args += ["--content-tokens", str(config.content_tokens)]
    sim = start_sim(*sim_args, name="bench", time_scale=config.time_scale, as_launched=True)
    procs: list[Proc] = [sim]
    try:
        if profile_out is None:
            gateway = start_gateway([sim.url])
        else:
            gateway = _start_profiled_gateway(sim, profile_out)
        procs.append(gateway)
        targets: dict[str, Target] = {"direct": Target(sim.url + "/v1/chat/completions", None)}
        for face in config.faces:
            targets[FACE_TARGETS[face]] = Target(gateway.url + _FACE_PATHS[face], gateway, face)
        if config.floor and profile_out is None:
            args = ["--port", "{port}", "--upstream-port", str(sim.port)]
            pipe = start_process("bench.pipe", args)
            procs.append(pipe)
            targets["pipe"] = Target(pipe.url + "/v1/chat/completions", pipe)
        if config.with_smg and profile_out is None:
            smg = _start_smg(sim)
            if smg is not None:
                procs.append(smg)
                targets["smg"] = Target(smg.url + "/v1/chat/completions", smg)
        yield targets, sim.url
    finally:
        for proc in reversed(procs):
            proc.stop()


def _start_profiled_gateway(sim: Proc, profile_out: Path) -> Proc:
    """The gateway under cProfile; the profile is written when it stops (SIGTERM)."""
    port = free_port()
    env = {
        "FLASHBOX_ENGINES": sim.url,
        "FLASHBOX_HOST": "127.0.0.1",
        "FLASHBOX_PORT": str(port),
    }
    return start_process("bench.overhead", ["serve-profiled", str(profile_out)], port=port, env=env)


def serve_profiled(profile_out: Path) -> None:
    """Serve the gateway (settings from the environment) with cProfile on, until SIGTERM.

    uvicorn re-raises SIGTERM after its shutdown, which would kill the process before the
    profile is written, so this runs its Server with our own signal handling.
    """
    import contextlib
    import signal

    import uvicorn

    from gateway.app import create_app
    from gateway.settings import load_settings

    # CPU time, not wall time: on a shared box wall time charges preemption to whatever ran.
    profiler = cProfile.Profile(time.process_time)

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            # Requests only: start-up (template compilation, clients) is not the hot path.
            profiler.enable()

    settings = load_settings()
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
    )
    server = _Server(config)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: setattr(server, "should_exit", True))
        await server.serve()

    try:
        uvloop_run(serve())
    finally:
        profiler.disable()
        profiler.dump_stats(str(profile_out))


def uvloop_run(coro: Any) -> None:
    import uvloop

    uvloop.run(coro)


class Rounds(Protocol):
    """What `measure` reads of a suite's config."""

    @property
    def levels(self) -> tuple[int, ...]: ...
    @property
    def requests_per_stream(self) -> int: ...
    @property
    def min_requests(self) -> int: ...
    @property
    def reps(self) -> int: ...
    @property
    def warmup(self) -> int: ...


def measure(
    targets: Mapping[str, Target],
    sim_url: str,
    config: Rounds,
    describe: Callable[[LevelResult], str],
    cpu: Callable[[Proc | None], float | None] = _cpu_seconds,
) -> list[LevelResult]:
    """Each level: `reps` rounds over the targets in a rotated order (so none always runs
    first), their samples pooled per target (the hop's CPU read by `cpu`); one printed line per
    target and level."""
    results: list[LevelResult] = []
    names = list(targets)
    for level in config.levels:
        total = max(config.min_requests, level * config.requests_per_stream)
        pooled = {name: _Samples([]) for name in names}
        for rep in range(config.reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                _sample(targets[name], sim_url, level, total, config.warmup, pooled[name], cpu)
        for name in names:
            result = _result(name, level, pooled[name])
            results.append(result)
            print(
                f"{name:9} x{level:<3} ok {result.ok}/{result.requests} {describe(result)}",
                flush=True,
            )
    return results


def run(config: Config) -> list[LevelResult]:
    with _stack(config, None) as (targets, sim_url):
        return measure(
            targets,
            sim_url,
            config,
            lambda r: (
                f"ttft p50 {r.ttft_p50_ms:.1f} ms p99 {r.ttft_p99_ms:.1f} ms "
                f"engine {r.engine_ttft_p50_ms:.2f} ms network+hops p50 {r.network_p50_ms:.2f} ms "
                f"cpu/token {r.cpu_us_per_token:.0f} us"
            ),
        )


def profile(config: Config, level: int, top: int = 25, face: Face = "openai") -> str:
    """The gateway's own profile under `level` streams of `face`, as pstats text (top by own
    time)."""
    out = Path(tempfile.mkstemp(prefix="gateway-", suffix=".prof")[1])
    with _stack(replace(config, faces=(face,)), out) as (targets, sim_url):
        total = max(config.min_requests, level * config.requests_per_stream)
        _sample(targets[FACE_TARGETS[face]], sim_url, level, total, config.warmup, _Samples([]))
    stream = io.StringIO()
    stats = pstats.Stats(str(out), stream=stream)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    out.unlink(missing_ok=True)
    return stream.getvalue()


def table(results: Sequence[LevelResult]) -> str:
    direct = {r.concurrency: r for r in results if r.target == "direct"}
    lines = [
        "| target | streams | ok | TTFT p50 ms | TTFT p99 ms | added p50 ms | added p99 ms "
        "| p50 ratio | engine TTFT p50 ms | hop-added p50 ms | hop-added p99 ms "
        "| hop CPU ms/req | hop CPU us/token | tokens per hop CPU-s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        base = direct.get(r.concurrency)
        added50 = r.ttft_p50_ms - base.ttft_p50_ms if base else math.nan
        added99 = r.ttft_p99_ms - base.ttft_p99_ms if base else math.nan
        factor = ratio(r.ttft_p50_ms, base.ttft_p50_ms) if base else math.nan
        hop50 = r.network_p50_ms - base.network_p50_ms if base else math.nan
        hop99 = r.network_p99_ms - base.network_p99_ms if base else math.nan
        lines.append(
            f"| {r.target} | {r.concurrency} | {r.ok}/{r.requests} | {r.ttft_p50_ms:.2f} "
            f"| {r.ttft_p99_ms:.2f} | {added50:.2f} | {added99:.2f} | {factor:.2f} "
            f"| {r.engine_ttft_p50_ms:.2f} | {hop50:.2f} | {hop99:.2f} "
            f"| {r.cpu_ms_per_request:.2f} | {r.cpu_us_per_token:.1f} "
            f"| {r.tokens_per_cpu_s:,.0f} |"
        )
    return "\n".join(lines)


# The goals for each other face against the OpenAI face at 1 stream.
GOAL_ADDED_TTFT_MS = 0.5
GOAL_CPU_RATIO = 1.2


def _deltas_over_direct(
    results: Sequence[LevelResult],
) -> dict[tuple[str, int], tuple[float, float]]:
    """(target, streams) -> (added p50 ms, hop-added p50 ms), both over direct's."""
    direct = {r.concurrency: r for r in results if r.target == "direct"}
    out: dict[tuple[str, int], tuple[float, float]] = {}
    for r in results:
        base = direct.get(r.concurrency)
        if base is None:
            out[r.target, r.concurrency] = (math.nan, math.nan)
        else:
            added = r.ttft_p50_ms - base.ttft_p50_ms
            out[r.target, r.concurrency] = (added, r.network_p50_ms - base.network_p50_ms)
    return out


def face_table(results: Sequence[LevelResult], face: Face = "anthropic") -> str:
    """`face` next to the OpenAI face, per level ("" unless both were measured)."""
    openai, other = FACE_TARGETS["openai"], FACE_TARGETS[face]
    name = FACE_LABELS[face]
    by_key = {(r.target, r.concurrency): r for r in results}
    levels = [r.concurrency for r in results if r.target == openai]
    levels = [level for level in levels if (other, level) in by_key]
    if not levels or face == "openai":
        return ""
    added = _deltas_over_direct(results)
    lines = [
        f"| streams | added TTFT p50 ms: OpenAI / {name} | {name} - OpenAI ms "
        f"| {name} / OpenAI | hop-added p50 ms: OpenAI / {name} | {name} - OpenAI ms "
        f"| {name} / OpenAI | gateway CPU us/token: OpenAI / {name} | {name} / OpenAI "
        f"| gateway CPU ms/req: OpenAI / {name} |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts: list[str] = []
    for level in levels:
        o, m = by_key[openai, level], by_key[other, level]
        (o_added, o_hop), (m_added, m_hop) = added[openai, level], added[other, level]
        cpu_ratio = ratio(m.cpu_us_per_token, o.cpu_us_per_token)
        lines.append(
            f"| {level} | {o_added:+.2f} / {m_added:+.2f} | {m_added - o_added:+.2f} "
            f"| {ratio(m_added, o_added):.2f} | {o_hop:+.2f} / {m_hop:+.2f} "
            f"| {m_hop - o_hop:+.2f} | {ratio(m_hop, o_hop):.2f} "
            f"| {o.cpu_us_per_token:.1f} / {m.cpu_us_per_token:.1f} | {cpu_ratio:.2f} "
            f"| {o.cpu_ms_per_request:.2f} / {m.cpu_ms_per_request:.2f} |"
        )
        if level == 1:
            verdicts.append(
                f"At 1 stream: added TTFT p50 {name} - OpenAI {m_added - o_added:+.2f} ms "
                f"(hop-added {m_hop - o_hop:+.2f} ms; goal <= {GOAL_ADDED_TTFT_MS} ms), gateway "
                f"CPU per relayed token {cpu_ratio:.2f}x (goal <= {GOAL_CPU_RATIO}x)."
            )
    return "\n".join(lines + (["", *verdicts] if verdicts else []))


def face_tables(results: Sequence[LevelResult], heading: str = "") -> str:
    """Each measured face other than OpenAI next to the OpenAI face, a table per face, each
    under "The <face> face next to the OpenAI face<heading>:"."""
    sections = []
    for face in FACES[1:]:
        found = face_table(results, face)
        if found:
            sections.append(
                f"The {FACE_LABELS[face]} face next to the OpenAI face{heading}:\n\n{found}"
            )
    return "\n\n".join(sections)


def _faces(text: str) -> tuple[Face, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in FACES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"--faces takes a comma-separated list of {', '.join(FACES)}; got {text!r}"
        )
    return tuple(face for face in FACES if face in names)


def _parse(argv: list[str]) -> tuple[Config, Path | None]:
    parser = argparse.ArgumentParser(prog="python -m bench overhead", description=__doc__)
    parser.add_argument("--levels", type=int, nargs="+", default=list(DEFAULT_LEVELS))
    parser.add_argument("--requests-per-stream", type=int, default=4)
    parser.add_argument("--min-requests", type=int, default=40)
    parser.add_argument("--reasoning-tokens", type=int, default=32)
    parser.add_argument("--content-tokens", type=int, default=96)
    parser.add_argument("--time-scale", type=float, default=0.001)
    parser.add_argument("--no-smg", action="store_true")
    parser.add_argument("--profile", action="store_true", help="also profile the gateway")
    parser.add_argument(
        "--floor", action="store_true", help="also measure a TCP byte pipe (bench.pipe)"
    )
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument(
        "--reps", type=int, default=3, help="interleaved rounds per level, samples pooled"
    )
    parser.add_argument(
        "--faces",
        type=_faces,
        default=FACES,
        help="the gateway's API faces to measure, comma-separated "
        "(default: openai,anthropic,responses)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write results JSON here")
    args = parser.parse_args(argv)
    config = Config(
        levels=tuple(args.levels),
        requests_per_stream=args.requests_per_stream,
        min_requests=args.min_requests,
        reasoning_tokens=args.reasoning_tokens,
        content_tokens=args.content_tokens,
        time_scale=args.time_scale,
        with_smg=not args.no_smg,
        profile=args.profile,
        floor=args.floor,
        warmup=args.warmup,
        reps=max(1, args.reps),
        faces=args.faces,
    )
    return config, args.out


def main(argv: list[str]) -> int:
    if any(arg == "--engine-url" or arg.startswith("--engine-url=") for arg in argv):
        # Over a real engine (make engine-cpu), beside the simulator: bench/engine_overhead.py.
        from bench import engine_overhead

        return engine_overhead.main(argv)
    config, out = _parse(argv)
    results = run(config)
    print(table(results))
    faces = face_tables(results, " (same gateway process)")
    if faces:
        print(f"\n{faces}")
    if out is not None:
        out.write_text(json.dumps([asdict(r) for r in results], indent=2))
    if config.profile:
        for face in config.faces:
            print(f"\ngateway profile, {face} face, 8 streams:\n{profile(config, 8, face=face)}")
    return 0


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    config, _ = _parse([])
    results = run(config)
    (out_dir / "overhead.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    profiles = {
        "openai": "gateway-profile.txt",
        "anthropic": "gateway-messages-profile.txt",
        "responses": "gateway-responses-profile.txt",
    }
    for face in config.faces:
        (out_dir / profiles[face]).write_text(profile(config, level=8, top=15, face=face))
    faces = face_tables(results)
    faces_section = f"{faces}\n\n" if faces else ""
    return (
        "## Gateway overhead (direct vs gateway vs smg, same simulator)\n\n"
        f"{table(results)}\n\n{faces_section}"
        "Client, simulator and hops share this machine's cores, so added TTFT includes CPU "
        f"contention; each level ran {config.reps} interleaved rounds per target, samples "
        "pooled. Gateway profile at 8 streams: "
        f"{', '.join(profiles[face] for face in config.faces)}.\n"
    )


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["serve-profiled"]:
        serve_profiled(Path(sys.argv[2]))
