"""SSE keepalive lateness: during a long prefill, do the faces' keepalives come on time?

A streamed Anthropic request gets `ping` events and a streamed Responses request
`response.in_progress` events every `keepalive_s` of silence while the engine prefills
(Claude Code and Codex drop a stream after 300 s without a byte). On a host with every core
busy the gateway's event loop runs late; this measures by how much. One simulator at the
reference host's pace (time scale 1) prefills a prompt of `prompt_tokens` (~8 s at 10k), in
front of a gateway whose keepalive interval is `interval_s`; the gaps between consecutive
keepalives (and from the request to the first) are recorded, and the worst is reported as a
multiple of the interval (goal: under 2).

    python -m bench keepalive [--interval 1] [--prompt-tokens 10000] [--cpu-burn]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench.procs import start_gateway, start_sim
from bench.workload import synthetic_text

MODEL = "glm-5.3-flash"


@dataclass(frozen=True)
class KeepaliveResult:
    face: str
    keepalives: int
    worst_gap_s: float
    interval_s: float

    @property
    def worst_ratio(self) -> float:
        return self.worst_gap_s / self.interval_s


def _gaps(url: str, path: str, body: dict[str, Any], marker: str) -> list[float]:
    """Seconds between the request and each keepalive, then between keepalives, until the
    first token's event."""
    gaps: list[float] = []
    last = time.perf_counter()
    with (
        httpx.Client(timeout=600) as client,
        client.stream("POST", url + path, json=body) as response,
    ):
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[len("data: ") :])
            kind = event.get("type")
            if kind == marker:
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
            elif kind in ("content_block_start", "response.output_item.added"):
                break
    return gaps


def measure(interval_s: float = 1.0, prompt_tokens: int = 10_000) -> list[KeepaliveResult]:
    sim = start_sim(time_scale=1.0, name="keepalive")
    env = {
        "FLASHBOX_ANTHROPIC__KEEPALIVE_S": str(interval_s),
        "FLASHBOX_RESPONSES__KEEPALIVE_S": str(interval_s),
        "FLASHBOX_API_KEYS": "",
    }
    gateway = start_gateway([sim.url], env=env)
    try:
        results = []
        prompt = synthetic_text(prompt_tokens * 4, seed=1)
        anthropic = {
            "model": MODEL,
            "max_tokens": 4,
            "stream": True,
            "messages": [{"role": "user", "content": prompt}],
        }
        gaps = _gaps(gateway.url, "/v1/messages", anthropic, "ping")
        results.append(
            KeepaliveResult("anthropic ping", len(gaps), max(gaps, default=0.0), interval_s)
        )
        responses = {
            "model": MODEL,
            "max_output_tokens": 4,
            "stream": True,
            "input": prompt + " again",  # another prompt: a full prefill again
        }
        gaps = _gaps(gateway.url, "/v1/responses", responses, "response.in_progress")
        # The first in_progress comes at once with response.created: only the silences count.
        results.append(
            KeepaliveResult(
                "responses in_progress", len(gaps), max(gaps[1:], default=0.0), interval_s
            )
        )
        return results
    finally:
        gateway.stop()
        sim.stop()


def markdown(rows: list[tuple[str, KeepaliveResult]]) -> str:
    lines = [
        "| host | keepalive | count | worst gap s | worst / interval (goal < 2) |",
        "|---|---|---|---|---|",
    ]
    for host, r in rows:
        lines.append(
            f"| {host} | {r.face} | {r.keepalives} | {r.worst_gap_s:.2f} | {r.worst_ratio:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench keepalive", description=__doc__)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--prompt-tokens", type=int, default=10_000)
    parser.add_argument("--cpu-burn", action="store_true", help="also with every core busy")
    args = parser.parse_args(argv)
    from bench.fleet import cpu_burn

    rows = [("idle", r) for r in measure(args.interval, args.prompt_tokens)]
    if args.cpu_burn:
        with cpu_burn():
            rows += [("saturated", r) for r in measure(args.interval, args.prompt_tokens)]
    print(markdown(rows))
    return 0
