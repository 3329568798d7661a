"""Fair shares of the engine: one key floods, another sends interactive turns (#33).

One simulator that runs `--running` requests at a time (the reference host's pace scaled by
`--time-scale`), behind a gateway with two API keys. The flooding key keeps `--flood` streams
open for `--seconds` (each sends its next request as the last one ends, asking for 100 to 700
tokens); the light key sends one short turn at a time (16 tokens), with `--think` seconds
between turns. Five phases, each on a fresh simulator and gateway:

- idle: the light key alone;
- FIFO: the flood and the light key, with the gateway's fair queue off (the engine's own
  queue, in arrival order);
- fair: the same with the fair queue on (gateway/fairness.py);
- FIFO and fair with the flood alone: what the gateway's queue itself costs the engine.

Reported: the light key's TTFT p50/p95 and its wait for a slot in the gateway; the engine's
mean slot-free interval (the phase's seconds over the requests that finished in it); the
flooding key's throughput (requests and output tokens per second), fair against FIFO.
Goals: the light key's fair p50 within 1.5x the slot-free interval; the flood's throughput
within 10% of FIFO. With the light key served, the flood gives up what the light key's
turns cost the engine: each is a prefill, and a prefill pauses every running decode.

    python -m bench fairness [--flood 24] [--running 4] [--seconds 40] [--think 2]
        [--time-scale 0.05] [--content-tokens 2000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.procs import metric_samples, start_gateway, start_sim
from bench.stats import percentile

MODEL = "glm-5.3-flash"
FLOOD_KEY, LIGHT_KEY = "bench-flood-key", "bench-light-key"


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    light_ttft: list[float] = field(default_factory=list)
    flood_done: int = 0
    flood_tokens: int = 0
    light_done: int = 0
    # The light key's mean wait for a running slot in the gateway (its fair-queue wait).
    light_slot_wait_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def slot_free_s(self) -> float:
        done = self.flood_done + self.light_done
        return self.seconds / done if done else 0.0

    def p(self, q: float) -> float:
        return percentile(self.light_ttft, q) if self.light_ttft else 0.0


def _stream(
    client: httpx.Client, url: str, key: str, text: str, max_tokens: int | None
) -> tuple[float | None, int]:
    """One streamed chat completion: seconds to its first output, and its output tokens."""
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    started = time.perf_counter()
    first: float | None = None
    tokens = 0
    headers = {"authorization": f"Bearer {key}"}
    with client.stream(
        "POST", url + "/v1/chat/completions", json=body, headers=headers
    ) as response:
        if response.status_code != 200:
            response.read()
            raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[len("data: ") :])
            if first is None and any(
                choice.get("delta", {}).get(part)
                for choice in chunk.get("choices", ())
                for part in ("content", "reasoning_content", "tool_calls")
            ):
                first = time.perf_counter() - started
            usage = chunk.get("usage")
            if usage:
                tokens = int(usage.get("completion_tokens") or 0)
    return first, tokens


def _flooder(
    url: str, phase: Phase, stop: threading.Event, index: int, lock: threading.Lock
) -> None:
    turn = 0
    # Answers of varied length, as a batch job's are: identical ones started together would
    # end together, and the engine would free its slots in bursts.
    lengths = random.Random(index)
    with httpx.Client(timeout=600) as client:
        while not stop.is_set():
            turn += 1
            text = f"batch job {index}.{turn}"
            try:
                _, tokens = _stream(client, url, FLOOD_KEY, text, lengths.randint(100, 700))
            except (httpx.HTTPError, RuntimeError) as exc:
                with lock:
                    phase.errors.append(str(exc))
                time.sleep(0.1)
                continue
            if stop.is_set():
                return  # finished after the window: not counted
            with lock:
                phase.flood_done += 1
                phase.flood_tokens += tokens


def _mean_wait(url: str, key: str) -> float:
    """The key's mean fair-queue wait, from the gateway's histogram (0: it never waited)."""
    wanted = {"key": hashlib.sha256(key.encode()).hexdigest()[:12]}
    total = sum(
        value
        for labels, value in metric_samples(url, "flashbox_fair_queue_wait_seconds_sum")
        if labels == wanted
    )
    count = sum(
        value
        for labels, value in metric_samples(url, "flashbox_fair_queue_wait_seconds_count")
        if labels == wanted
    )
    return total / count if count else 0.0


def _light_turns(url: str, phase: Phase, until: float, think_s: float) -> None:
    with httpx.Client(timeout=600) as client:
        turn = 0
        while time.perf_counter() < until:
            turn += 1
            try:
                first, _ = _stream(client, url, LIGHT_KEY, f"question {turn}", 16)
            except (httpx.HTTPError, RuntimeError) as exc:
                phase.errors.append(str(exc))
                continue
            if first is not None:
                phase.light_ttft.append(first)
            phase.light_done += 1
            time.sleep(think_s)


@dataclass(frozen=True)
class Setup:
    flood: int = 24
    running: int = 4
    seconds: float = 40.0
    think_s: float = 2.0
    time_scale: float = 0.05
    content_tokens: int = 2000


def run_phase(name: str, setup: Setup, *, flood: bool, light: bool, fair: bool) -> Phase:
    sim = start_sim(
        "--max-running-requests",
        str(setup.running),
        "--content-tokens",
        str(setup.content_tokens),
        time_scale=setup.time_scale,
        name="fairness",
    )
    env = {
        "FLASHBOX_API_KEYS": f"{FLOOD_KEY},{LIGHT_KEY}",
        "FLASHBOX_FAIRNESS__ENABLED": "true" if fair else "false",
        "FLASHBOX_HEALTH__INTERVAL_S": "0.5",
    }
    gateway = start_gateway([sim.url], env=env)
    phase = Phase(name)
    stop = threading.Event()
    lock = threading.Lock()
    threads = [
        threading.Thread(target=_flooder, args=(gateway.url, phase, stop, i, lock), daemon=True)
        for i in range(setup.flood if flood else 0)
    ]
    try:
        for thread in threads:
            thread.start()
        if threads:
            time.sleep(min(5.0, setup.seconds / 4))  # the flood fills the slots and the queue
        started = time.perf_counter()
        with lock:
            phase.flood_done = phase.flood_tokens = 0
        if light:
            _light_turns(gateway.url, phase, started + setup.seconds, setup.think_s)
        else:
            time.sleep(setup.seconds)
        with lock:
            phase.seconds = time.perf_counter() - started
            stop.set()
        phase.light_slot_wait_s = _mean_wait(gateway.url, LIGHT_KEY)
        for thread in threads:
            thread.join(timeout=120)
        return phase
    finally:
        stop.set()
        gateway.stop()
        sim.stop()


def measure(setup: Setup) -> list[Phase]:
    return [
        run_phase("idle", setup, flood=False, light=True, fair=True),
        run_phase("FIFO", setup, flood=True, light=True, fair=False),
        run_phase("fair", setup, flood=True, light=True, fair=True),
        # The flood alone: what the gateway's own queue costs the engine's throughput.
        run_phase("FIFO, flood alone", setup, flood=True, light=False, fair=False),
        run_phase("fair, flood alone", setup, flood=True, light=False, fair=True),
    ]


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def _rate(p: Phase) -> float:
    return p.flood_tokens / p.seconds if p.seconds else 0.0


def markdown(phases: list[Phase], setup: Setup) -> str:
    by = {p.name: p for p in phases}
    fifo, fair, idle = by["FIFO"], by["fair"], by["idle"]
    alone = _ratio(_rate(by["fair, flood alone"]), _rate(by["FIFO, flood alone"]))
    lines = [
        f"One key keeps {setup.flood} streams open on an engine that runs {setup.running} at "
        f"a time; the other sends one 16-token turn at a time, {setup.think_s:g} s apart "
        f"({setup.seconds:g} s a phase, time scale {setup.time_scale:g}).",
        "",
        "| phase | light TTFT p50 s | p95 s | light slot wait s | light turns | "
        "slot-free interval s | flood req/s | flood tok/s | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in phases:
        light = (
            f"{p.p(50):.2f} | {p.p(95):.2f} | {p.light_slot_wait_s:.2f} | {len(p.light_ttft)}"
            if p.light_ttft
            else "- | - | - | 0"
        )
        lines.append(
            f"| {p.name} | {light} | {p.slot_free_s:.2f} | {p.flood_done / p.seconds:.2f} | "
            f"{_rate(p):.0f} | {len(p.errors)} |"
        )
    lines += [
        "",
        f"- light TTFT p50 / slot-free interval: fair {_ratio(fair.p(50), fair.slot_free_s)}x "
        f"(goal <= 1.5), FIFO {_ratio(fifo.p(50), fifo.slot_free_s)}x",
        f"- light TTFT p50 flooded / idle: fair {_ratio(fair.p(50), idle.p(50))}x, "
        f"FIFO {_ratio(fifo.p(50), idle.p(50))}x",
        f"- flood output tokens/s, fair / FIFO: {_ratio(_rate(fair), _rate(fifo))} with the "
        f"light key served ({len(fair.light_ttft)} turns against {len(fifo.light_ttft)}); "
        f"the flood alone: {alone} (goal: within 10%)",
    ]
    return "\n".join(lines)


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    setup = Setup()
    text = "## Fair shares under a flood\n\n" + markdown(measure(setup), setup)
    (out_dir / "fairness.md").write_text(text + "\n")
    return text


def main(argv: list[str]) -> int:
    defaults = Setup()
    parser = argparse.ArgumentParser(prog="python -m bench fairness", description=__doc__)
    parser.add_argument("--flood", type=int, default=defaults.flood)
    parser.add_argument("--running", type=int, default=defaults.running)
    parser.add_argument("--seconds", type=float, default=defaults.seconds)
    parser.add_argument("--think", type=float, default=defaults.think_s)
    parser.add_argument("--time-scale", type=float, default=defaults.time_scale)
    parser.add_argument("--content-tokens", type=int, default=defaults.content_tokens)
    args = parser.parse_args(argv)
    setup = Setup(
        flood=args.flood,
        running=args.running,
        seconds=args.seconds,
        think_s=args.think,
        time_scale=args.time_scale,
        content_tokens=args.content_tokens,
    )
    phases = measure(setup)
    print(markdown(phases, setup))
    for p in phases:
        for error in p.errors[:3]:
            print(f"{p.name}: {error}")
    return 0
