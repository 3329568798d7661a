"""`python -m bench overhead --engine-url URL`: the gateway's added TTFT and CPU per token over
a real engine (the sglang-kt server of `make engine-cpu`, or any SGLang), beside the same
figures over the simulator, in one run.

For each engine (the simulator this run starts, then URL) a gateway is started in front of it
and the same chat request goes, in alternation, two ways:
  direct   POST /generate on the engine with the prompt text the gateway renders for it and
           the same sampling parameters (what the gateway itself sends, minus the gateway)
  gateway  POST /v1/chat/completions through the gateway (render, route, parse, relay)
Client-side TTFT (first chunk with text) p50/p95 per way; "added" is gateway minus direct
(ms) and gateway / direct; gateway CPU is the gateway process's CPU time (psutil) over the
gateway requests, per request and per relayed token. Requests are sequential, so no queueing
inside the engine blurs what the hop adds; rounds alternate the two ways so a slow spell of
the shared machine falls on both.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]

from bench.procs import Proc, start_gateway, start_sim
from bench.stats import percentile, ratio
from gateway.components import load_renderer
from gateway.settings import load_settings

SYSTEM = "You are a coding assistant. Answer briefly. " * 8
USER = "Explain what a prefix cache is, in one paragraph."


@dataclass
class WaySamples:
    ttft_ms: list[float] = field(default_factory=list)
    tokens: int = 0


@dataclass
class EngineResult:
    engine: str
    requests: int
    direct_ttft_p50_ms: float
    direct_ttft_p95_ms: float
    gateway_ttft_p50_ms: float
    gateway_ttft_p95_ms: float
    added_p50_ms: float
    added_p95_ms: float
    ttft_ratio_p50: float
    gateway_cpu_ms_per_request: float
    gateway_cpu_us_per_token: float


def rendered_prompt() -> str:
    """The prompt text the gateway sends for the benchmark's chat request."""
    settings = load_settings()
    renderer = load_renderer(settings.render)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    return renderer.render(messages, None, {})


def _stream(
    client: httpx.Client,
    url: str,
    body: dict[str, Any],
    has_text: Callable[[dict[str, Any]], bool],
    tokens_in: Callable[[dict[str, Any]], int | None],
) -> tuple[float, int]:
    """One streamed request: seconds to the first event with text, and the tokens reported."""
    started = time.perf_counter()
    ttft: float | None = None
    tokens = 0
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if ttft is None and has_text(event):
                ttft = time.perf_counter() - started
            tokens = tokens_in(event) or tokens
    return (ttft if ttft is not None else time.perf_counter() - started), tokens


def _direct(client: httpx.Client, url: str, prompt: str, max_tokens: int) -> tuple[float, int]:
    body = {
        "text": prompt,
        "sampling_params": {
            "max_new_tokens": max_tokens,
            "temperature": 0,
            "stop": ["<|user|>", "<|observation|>"],
            "skip_special_tokens": False,
        },
        "stream": True,
    }
    return _stream(
        client,
        url + "/generate",
        body,
        lambda event: bool(event.get("text")),
        lambda event: int(event.get("meta_info", {}).get("completion_tokens") or 0),
    )


def _chunk_has_text(chunk: dict[str, Any]) -> bool:
    deltas = [choice.get("delta") or {} for choice in chunk.get("choices") or []]
    return any(d.get("content") or d.get("reasoning_content") for d in deltas)


def _gateway(client: httpx.Client, url: str, max_tokens: int) -> tuple[float, int]:
    body = {
        "model": "glm-5.3-flash",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return _stream(
        client,
        url + "/v1/chat/completions",
        body,
        _chunk_has_text,
        lambda chunk: int((chunk.get("usage") or {}).get("completion_tokens") or 0),
    )


def measure(
    name: str, engine_url: str, gateway: Proc, requests: int, max_tokens: int, warmup: int
) -> EngineResult:
    prompt = rendered_prompt()
    direct, through = WaySamples(), WaySamples()
    process = psutil.Process(gateway.popen.pid)
    cpu_s = 0.0
    with httpx.Client(timeout=600) as client:
        for _ in range(warmup):
            _direct(client, engine_url, prompt, max_tokens)
            _gateway(client, gateway.url, max_tokens)
        for index in range(requests):
            # Alternate which way goes first in each round.
            order = ("direct", "gateway") if index % 2 == 0 else ("gateway", "direct")
            for way in order:
                if way == "direct":
                    ttft, tokens = _direct(client, engine_url, prompt, max_tokens)
                    direct.ttft_ms.append(ttft * 1000)
                    direct.tokens += tokens
                else:
                    before = sum(process.cpu_times()[:2])
                    ttft, tokens = _gateway(client, gateway.url, max_tokens)
                    cpu_s += sum(process.cpu_times()[:2]) - before
                    through.ttft_ms.append(ttft * 1000)
                    through.tokens += tokens
    d50, d95 = percentile(direct.ttft_ms, 50), percentile(direct.ttft_ms, 95)
    g50, g95 = percentile(through.ttft_ms, 50), percentile(through.ttft_ms, 95)
    return EngineResult(
        engine=name,
        requests=requests,
        direct_ttft_p50_ms=d50,
        direct_ttft_p95_ms=d95,
        gateway_ttft_p50_ms=g50,
        gateway_ttft_p95_ms=g95,
        added_p50_ms=g50 - d50,
        added_p95_ms=g95 - d95,
        ttft_ratio_p50=ratio(g50, d50),
        gateway_cpu_ms_per_request=cpu_s * 1000 / max(requests, 1),
        gateway_cpu_us_per_token=cpu_s * 1e6 / max(through.tokens, 1),
    )


def table(results: Sequence[EngineResult]) -> str:
    lines = [
        "| engine | requests | direct TTFT p50 / p95 ms | gateway TTFT p50 / p95 ms "
        "| added p50 / p95 ms | gateway / direct p50 | gateway CPU ms/request | CPU us/token |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.engine} | {r.requests} | {r.direct_ttft_p50_ms:.2f} / "
            f"{r.direct_ttft_p95_ms:.2f} | {r.gateway_ttft_p50_ms:.2f} / "
            f"{r.gateway_ttft_p95_ms:.2f} | {r.added_p50_ms:+.2f} / {r.added_p95_ms:+.2f} "
            f"| {r.ttft_ratio_p50:.2f}x | {r.gateway_cpu_ms_per_request:.2f} "
            f"| {r.gateway_cpu_us_per_token:.1f} |"
        )
    return "\n".join(lines) + "\n"


def run(
    engine_url: str, requests: int, max_tokens: int, warmup: int, time_scale: float
) -> list[EngineResult]:
    env = {"FLASHBOX_API_KEYS": "", "FLASHBOX_LIMITS__MAX_BODY_BYTES": "2000000"}
    results = []
    sim = start_sim(name="overhead-sim", time_scale=time_scale, as_launched=True)
    try:
        for name, url in (("simulator", sim.url), ("sglang-kt", engine_url.rstrip("/"))):
            gateway = start_gateway([url], env=env)
            try:
                results.append(measure(name, url, gateway, requests, max_tokens, warmup))
            finally:
                gateway.stop()
    finally:
        sim.stop()
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench overhead --engine-url URL")
    parser.add_argument("--engine-url", required=True, help="a running SGLang server")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument(
        "--time-scale",
        type=float,
        default=0.001,
        help="the simulator's clock (1: the reference GLM host; 0.001: a near-instant engine)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write results JSON here")
    args = parser.parse_args(argv)
    results = run(args.engine_url, args.requests, args.max_tokens, args.warmup, args.time_scale)
    print(table(results))
    if args.out is not None:
        args.out.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0
