"""Load and soak: many concurrent streaming clients against the gateway and 3 simulators.

Each client loops: one streamed chat, checked end to end (200, token chunks, a finish reason,
`[DONE]`, no error event), then the next. A tenth of the clients instead stream /generate
straight from a simulator: they see the same engine load without the gateway, so per minute
`added p99 = p99(TTFT via gateway) - p99(TTFT direct)` is what the gateway adds under that
load. The gateway's RSS is sampled throughout; growth is measured from the end of warm-up.

`python -m bench soak --clients 1000 --minutes 10` is the full run; `report()` (make bench)
runs 300 clients for 2 minutes and says so. The HTTP client is a minimal asyncio one: on 2
cores a heavier client would measure itself rather than the gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil  # type: ignore[import-untyped]

from bench.procs import Proc, start_gateway, start_process
from bench.stats import percentile

MODEL = "glm-5.3-flash"
GATEWAY_ENV = {
    "FLASHBOX_UPSTREAM__FORWARD_CUSTOM_PARAMS": "true",
    "FLASHBOX_ADMISSION__MAX_IN_FLIGHT": "4096",
    "FLASHBOX_OBSERVABILITY__LOG_LEVEL": "warning",
}
# Output shape per request (simulator steering): short answers, so requests turn over.
SIM_OUTPUT = {"reasoning_tokens": 8, "content_tokens": 24, "tool_calls": 0}


# A chunk that carries generated text (not the role-only first chunk, not an empty event).
_TOKEN = re.compile(rb'"(?:content|reasoning_content|text)":"[^"]')


def direct_clients(clients: int) -> int:
    """Baseline clients that bypass the gateway: one per nine through it."""
    return max(1, clients // 9)


@dataclass
class Window:
    gateway_ttft: list[float] = field(default_factory=list)
    direct_ttft: list[float] = field(default_factory=list)
    gateway_e2e: list[float] = field(default_factory=list)
    direct_e2e: list[float] = field(default_factory=list)
    ok: int = 0
    errors: int = 0


@dataclass
class Run:
    started: float
    window_s: float
    windows: dict[int, Window] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    rss: list[tuple[float, int]] = field(default_factory=list)

    def window(self) -> Window:
        index = int((time.monotonic() - self.started) // self.window_s)
        return self.windows.setdefault(index, Window())

    def error(self, text: str) -> None:
        self.window().errors += 1
        if len(self.error_samples) < 20:
            self.error_samples.append(text)


async def _stream(host: str, port: int, path: str, body: bytes) -> tuple[int, float | None, bytes]:
    """POST and read the whole streamed response; (status, TTFT, body). Chunked encoding is
    parsed only as far as needed: SSE lines are found in the raw bytes."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        ttft: float | None = None
        data = bytearray()
        while chunk := await reader.read(65536):
            if ttft is None and _TOKEN.search(chunk):
                ttft = time.monotonic() - started
            data += chunk
        return status, ttft, bytes(data)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _check(status: int, data: bytes) -> str | None:
    if status != 200:
        return f"status {status}: {data[:200]!r}"
    if b'"error"' in data:
        start = data.find(b'"error"')
        return f"error event: {data[start : start + 200]!r}"
    if b"data: [DONE]" not in data:
        return "stream ended without [DONE]"
    return None


async def _client(
    run: Run, gateway: Proc, sims: list[Proc], direct: bool, stop_at: float, seed: int
) -> None:
    rng = random.Random(seed)
    # Spread the starts over a few seconds, as real clients arrive.
    await asyncio.sleep(rng.uniform(0, 5))
    while time.monotonic() < stop_at:
        prompt = f"soak client {seed} turn {rng.random():.6f}: summarise the plan."
        if direct:
            sim = rng.choice(sims)
            body = orjson.dumps(
                {
                    "text": f"[gMASK]<sop><|user|>{prompt}<|assistant|><think>",
                    "stream": True,
                    "sampling_params": {"max_new_tokens": 64},
                    "custom_params": {"sim": SIM_OUTPUT},
                }
            )
            port, path = sim.port, "/generate"
        else:
            body = orjson.dumps(
                {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": prompt}],
                    "stream": True,
                    "max_tokens": 64,
                    "custom_params": {"sim": SIM_OUTPUT},
                }
            )
            port, path = gateway.port, "/v1/chat/completions"
        started = time.monotonic()
        try:
            status, ttft, data = await _stream("127.0.0.1", port, path, body)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            run.error(f"{'direct' if direct else 'gateway'}: {exc!r}")
            await asyncio.sleep(0.5)
            continue
        problem = _check(status, data)
        window = run.window()
        if problem is not None:
            run.error(("direct: " if direct else "gateway: ") + problem)
            continue
        if ttft is None:
            run.error("no token in a complete stream")
            continue
        window.ok += 1
        (window.direct_ttft if direct else window.gateway_ttft).append(ttft)
        e2e = time.monotonic() - started
        (window.direct_e2e if direct else window.gateway_e2e).append(e2e)


async def _sample_rss(run: Run, pid: int, stop_at: float) -> None:
    process = psutil.Process(pid)
    while time.monotonic() < stop_at:
        run.rss.append((time.monotonic() - run.started, process.memory_info().rss))
        await asyncio.sleep(2.0)


async def _soak(
    gateway: Proc, sims: list[Proc], clients: int, seconds: float, window_s: float
) -> Run:
    run = Run(started=time.monotonic(), window_s=window_s)
    stop_at = run.started + seconds
    tasks = [
        asyncio.create_task(_client(run, gateway, sims, False, stop_at, seed=i))
        for i in range(clients)
    ]
    tasks += [
        asyncio.create_task(_client(run, gateway, sims, True, stop_at, seed=clients + i))
        for i in range(direct_clients(clients))
    ]
    tasks.append(asyncio.create_task(_sample_rss(run, gateway.popen.pid, stop_at)))
    await asyncio.gather(*tasks)
    return run


def _summary(run: Run, clients: int, seconds: float, warmup_s: float) -> dict[str, Any]:
    rows = []
    for index in sorted(run.windows):
        w = run.windows[index]
        g99 = percentile(w.gateway_ttft, 99)
        d99 = percentile(w.direct_ttft, 99)
        rows.append(
            {
                "window": index,
                "completed": w.ok,
                "errors": w.errors,
                "gateway_ttft_p50_s": percentile(w.gateway_ttft, 50) if w.gateway_ttft else None,
                "gateway_ttft_p99_s": g99,
                "direct_ttft_p99_s": d99,
                "added_p99_s": g99 - d99,
                "gateway_e2e_p50_s": percentile(w.gateway_e2e, 50),
                "direct_e2e_p50_s": percentile(w.direct_e2e, 50),
            }
        )
    after = [rss for t, rss in run.rss if t >= warmup_s]
    growth = (after[-1] - after[0]) / after[0] if len(after) >= 2 else float("nan")
    return {
        "clients": clients,
        "seconds": seconds,
        "warmup_s": warmup_s,
        "windows": rows,
        "errors": sum(w.errors for w in run.windows.values()),
        "completed": sum(w.ok for w in run.windows.values()),
        "error_samples": run.error_samples,
        "rss_after_warmup_mib": after[0] / 2**20 if after else None,
        "rss_end_mib": after[-1] / 2**20 if after else None,
        "rss_peak_mib": max(r for _, r in run.rss) / 2**20 if run.rss else None,
        "rss_growth": growth,
    }


def soak(
    clients: int, minutes: float, *, time_scale: float, window_s: float, warmup_s: float
) -> dict[str, Any]:
    sims = [
        start_process(
            "engine.sim",
            [
                "--host",
                "127.0.0.1",
                "--port",
                "{port}",
                "--time-scale",
                str(time_scale),
                "--name",
                f"soak-{i}",
                "--max-running-requests",
                "4096",
                "--max-queued-requests",
                "8192",
            ],
        )
        for i in range(3)
    ]
    gateway = start_gateway([s.url for s in sims], env=GATEWAY_ENV)
    try:
        run = asyncio.run(_soak(gateway, sims, clients, minutes * 60, window_s))
        summary = _summary(run, clients, minutes * 60, warmup_s)
        summary["gateway_alive"] = gateway.alive()
        summary["time_scale"] = time_scale
        return summary
    finally:
        gateway.stop()
        for sim in sims:
            sim.stop()


def _markdown(summary: dict[str, Any], note: str) -> str:
    lines = [
        "## Soak: concurrent streaming clients through the gateway to 3 simulators",
        "",
        note,
        "",
        f"- clients: {summary['clients']} via the gateway "
        f"(+{direct_clients(summary['clients'])} direct to the simulators as the baseline), "
        f"{summary['seconds'] / 60:g} min, simulator "
        f"time scale {summary['time_scale']}",
        f"- completed streams: {summary['completed']}, unexpected errors: {summary['errors']}",
        f"- gateway RSS after {summary['warmup_s']:g} s warm-up: "
        f"{summary['rss_after_warmup_mib']:.1f} MiB, at the end {summary['rss_end_mib']:.1f} MiB "
        f"(growth {summary['rss_growth'] * 100:+.1f}%, peak {summary['rss_peak_mib']:.1f} MiB)",
        "",
        "| window | completed | errors | TTFT p50 via gw (s) | TTFT p99 via gw (s) "
        "| TTFT p99 direct (s) | added p99 (s) | e2e p50 via gw / direct (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["windows"]:
        lines.append(
            f"| {row['window']} | {row['completed']} | {row['errors']} | "
            f"{row['gateway_ttft_p50_s'] or float('nan'):.3f} | {row['gateway_ttft_p99_s']:.3f} | "
            f"{row['direct_ttft_p99_s']:.3f} | {row['added_p99_s']:.3f} | "
            f"{row['gateway_e2e_p50_s']:.2f} / {row['direct_e2e_p50_s']:.2f} |"
        )
    if summary["error_samples"]:
        lines += ["", "First errors: " + "; ".join(summary["error_samples"][:5])]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench soak")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--time-scale", type=float, default=0.1)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/soak"))
    args = parser.parse_args(argv)
    summary = soak(
        args.clients,
        args.minutes,
        time_scale=args.time_scale,
        window_s=args.window_s,
        warmup_s=args.warmup_s,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(summary, indent=2))
    print(_markdown(summary, f"`python -m bench soak {' '.join(argv)}`"))
    return 0 if summary["errors"] == 0 and summary["gateway_alive"] else 1


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = soak(300, 2.0, time_scale=0.1, window_s=30.0, warmup_s=30.0)
    (out_dir / "soak.json").write_text(json.dumps(summary, indent=2))
    return _markdown(
        summary,
        "Short version for `make bench` (300 clients, 2 minutes, 30 s windows); the full soak "
        "is `python -m bench soak --clients 1000 --minutes 10`.",
    )
