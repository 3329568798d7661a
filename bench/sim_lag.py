"""`python -m bench sim`: how far the simulator falls behind its own performance model.

For 1, 64 and 1,000 concurrent streams, a fresh simulator pinned to one CPU core serves every
stream in one running batch (max running requests = streams, the heaviest case: each decode
step produces a token for every stream). Each request reports its modelled timeline in
meta_info["sim"]; the client measures the same request's wall-clock TTFT and end-to-end time.
measured / modelled = 1.00 means the simulator kept its model's pace exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.stats import percentile

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STREAMS = (1, 64, 1000)


@dataclass
class Sample:
    ttft_measured: float
    e2e_measured: float
    ttft_modelled: float
    e2e_modelled: float
    tokens: int
    e2e_server: float


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_sim(
    streams: int, time_scale: float, core: int | None
) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "engine.sim",
        "--port",
        str(port),
        "--time-scale",
        str(time_scale),
        "--max-running-requests",
        str(max(1, streams)),
        "--name",
        f"lag-{streams}",
    ]
    with tempfile.TemporaryFile() as log:
        popen = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    if core is not None:
        os.sched_setaffinity(popen.pid, {core})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return popen, port
        time.sleep(0.05)
    popen.kill()
    raise RuntimeError("simulator did not become healthy")


async def one_stream(port: int, body: bytes) -> Sample:
    """A minimal HTTP/1.1 SSE client: cheap enough that 1,000 of them fit one core."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /generate HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.decode(errors="replace"))
    buffer = b""
    first: float | None = None
    final: dict[str, Any] | None = None
    done = False
    while not done:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            break
        buffer += (await reader.readexactly(size + 2))[:-2]
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if event == b"data: [DONE]":
                done = True
                break
            if first is None:
                first = time.perf_counter()
            if b'"finish_reason":null' not in event:
                final = orjson.loads(event[6:])
    ended = time.perf_counter()
    writer.close()
    if final is None or first is None:
        raise RuntimeError("stream ended without a final event")
    model = final["meta_info"]["sim"]
    scale = model["time_scale"]
    return Sample(
        ttft_measured=first - started,
        e2e_measured=ended - started,
        ttft_modelled=model["ttft_s"] * scale,
        e2e_modelled=model["e2e_s"] * scale,
        tokens=final["meta_info"]["completion_tokens"],
        e2e_server=final["meta_info"]["e2e_latency"],
    )


def _body(i: int, prompt_tokens: int, output_tokens: int) -> bytes:
    prefix = f"lag request {i}: "
    text = prefix + "x" * max(0, prompt_tokens * 4 - len(prefix))
    return orjson.dumps(
        {
            "text": text,
            "stream": True,
            "sampling_params": {"max_new_tokens": output_tokens, "ignore_eos": True},
        }
    )


async def run_level(
    streams: int, rounds: int, port: int, prompt_tokens: int, output_tokens: int
) -> list[Sample]:
    samples: list[Sample] = []
    for r in range(rounds):
        bodies = [_body(r * streams + i, prompt_tokens, output_tokens) for i in range(streams)]
        samples += await asyncio.gather(*(one_stream(port, b) for b in bodies))
    return samples


def measure(
    streams: int,
    time_scale: float,
    prompt_tokens: int,
    output_tokens: int,
    rounds: int,
    sim_core: int | None,
) -> dict[str, Any]:
    popen, port = start_sim(streams, time_scale, sim_core)
    try:
        asyncio.run(run_level(1, 1, port, prompt_tokens, 4))  # warm-up
        cpu0 = _cpu_seconds(popen.pid)
        wall0 = time.perf_counter()
        samples = asyncio.run(run_level(streams, rounds, port, prompt_tokens, output_tokens))
        wall = time.perf_counter() - wall0
        cpu = _cpu_seconds(popen.pid) - cpu0
    finally:
        popen.terminate()
        popen.wait(10)
    e2e = [s.e2e_measured / s.e2e_modelled for s in samples]
    ttft = [s.ttft_measured / s.ttft_modelled for s in samples]
    tokens = sum(s.tokens for s in samples)
    return {
        "streams": streams,
        "requests": len(samples),
        "time_scale": time_scale,
        "e2e_ratio_p50": percentile(e2e, 50),
        "e2e_ratio_p99": percentile(e2e, 99),
        "ttft_ratio_p50": percentile(ttft, 50),
        "ttft_ratio_p99": percentile(ttft, 99),
        "e2e_modelled_p50_s": percentile([s.e2e_modelled for s in samples], 50),
        "e2e_measured_p50_s": percentile([s.e2e_measured for s in samples], 50),
        "server_e2e_ratio_p50": percentile([s.e2e_server / s.e2e_modelled for s in samples], 50),
        "sim_cpu_share": cpu / wall if wall else 0.0,
        "tokens_per_s": tokens / wall if wall else 0.0,
        "sim_cpu_us_per_token": 1e6 * cpu / tokens if tokens else 0.0,
    }


def _cores() -> tuple[int | None, int | None]:
    """Simulator on one core, this client on another where there are two."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        return None, None
    return available[0], available[1]


def run(
    streams: tuple[int, ...],
    time_scale: float,
    prompt_tokens: int,
    output_tokens: int,
    rounds_single: int,
) -> list[dict[str, Any]]:
    sim_core, client_core = _cores()
    own_cores = os.sched_getaffinity(0)
    if client_core is not None:
        os.sched_setaffinity(0, {client_core})
    results = []
    try:
        for n in streams:
            rounds = rounds_single if n == 1 else 1
            results.append(measure(n, time_scale, prompt_tokens, output_tokens, rounds, sim_core))
            print(json.dumps(results[-1]), flush=True)
    finally:
        # `python -m bench all` runs other suites in this process afterwards.
        os.sched_setaffinity(0, own_cores)
    return results


def to_markdown(results: list[dict[str, Any]], prompt_tokens: int, output_tokens: int) -> str:
    lines = [
        "## Simulator lag behind its own model",
        "",
        f"Each stream: {prompt_tokens}-token prompt, {output_tokens} output tokens, one SSE event "
        "per token; all streams in one running batch; simulator pinned to one core, the client "
        "to another. Ratio = measured / modelled wall time (1.00 = on model); the client's "
        "wall time includes connecting; the server-side ratio uses the simulator's own "
        "e2e_latency. Other load on the machine shows up as lag.",
        "",
        "| streams | requests | time scale | e2e ratio p50 | e2e ratio p99 | server-side e2e ratio "
        "p50 | TTFT ratio p50 | TTFT ratio p99 | modelled e2e p50 | sim CPU (cores) "
        "| sim CPU per token | tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['streams']} | {r['requests']} | {r['time_scale']:g} | {r['e2e_ratio_p50']:.2f} "
            f"| {r['e2e_ratio_p99']:.2f} | {r['server_e2e_ratio_p50']:.2f} "
            f"| {r['ttft_ratio_p50']:.2f} | {r['ttft_ratio_p99']:.2f} "
            f"| {r['e2e_modelled_p50_s']:.2f} s | {r['sim_cpu_share']:.2f} "
            f"| {r['sim_cpu_us_per_token']:.0f} µs | {r['tokens_per_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench sim", description=__doc__)
    p.add_argument("--streams", type=int, nargs="+", default=list(DEFAULT_STREAMS))
    p.add_argument("--time-scale", type=float, default=0.01)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--rounds-single", type=int, default=20, help="sequential runs at 1 stream")
    p.add_argument("--out", type=Path, default=None, help="write results.json and report.md here")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    results = run(
        tuple(args.streams),
        args.time_scale,
        args.prompt_tokens,
        args.output_tokens,
        args.rounds_single,
    )
    markdown = to_markdown(results, args.prompt_tokens, args.output_tokens)
    print(markdown)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=2))
        (args.out / "report.md").write_text(markdown)
    return 0


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    results = run(DEFAULT_STREAMS, 0.01, 256, 64, 20)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    return to_markdown(results, 256, 64)
