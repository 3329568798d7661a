"""Text requests' TTFT while image requests are being checked, through gateway + simulator.

The media stage checks images in worker threads; this measures whether image requests delay
text requests on the same gateway, and which part of that delay is the gateway's. One process
pair, four phases:

1. alone: `--requests` streaming text requests, one at a time;
2. images only: `--image-requests` requests each carrying one 1920x1080 noise PNG (the worst
   case, 4.4 MB), `--image-clients` at a time: CPU per image request of the gateway (the whole
   request: body, media stage, render, the /generate body), the simulator and this client;
3. via the gateway: the same text requests while image requests arrive at `--image-rate` a
   second through the gateway;
4. straight to the engine: the same again, with the same image requests sent to the
   simulator's /generate directly. The simulator decodes every image, as the engine's
   processor does, and on a small machine that work and the client's slow text requests too;
   what phase 3 adds over phase 4 is the gateway's share.

Per phase: text TTFT p50/p95 as the client saw it, and the hops' part of it (client TTFT minus
the engine's own arrival-to-first-token, GET /sim/timings), and each process's CPU. `--pin`
gives the gateway its own CPUs (half, rounded down) and the simulator and this client the
rest: on 2 CPUs the gateway's check thread then shares one CPU with its event loop, a worst
case rather than a deployment.

    python -m bench media-load [--requests N] [--image-rate R] [--image-clients K]
                               [--image-requests M] [--pin]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]

from bench.client import stream_chat
from bench.media import _data_url, _encode, noise
from bench.procs import Proc, start_gateway, start_sim
from bench.sessions import fetch_engine_timings
from bench.stats import percentile

MODEL = "glm-5.3-flash"
WIDTH, HEIGHT = 1920, 1080
# What the gateway renders in place of an image part (the model's markers), for phase 4.
IMAGE_MARKERS = "<|begin_of_image|><|image|><|end_of_image|>"


def _text_body() -> dict[str, Any]:
    prompt = f"Text request {uuid.uuid4().hex}: say something short."
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 64}


def _image_body(url: str) -> dict[str, Any]:
    # A fresh text part per request: no two image requests share a session root or a prefix.
    text = f"Image request {uuid.uuid4().hex}: what is this?"
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 8}


def _generate_body(url: str) -> dict[str, Any]:
    """The same image request as the engine's /generate receives it."""
    text = f"{IMAGE_MARKERS}Image request {uuid.uuid4().hex}: what is this?"
    return {"text": text, "image_data": [url], "sampling_params": {"max_new_tokens": 8}}


@dataclass
class _Text:
    ttft_ms: list[float] = field(default_factory=list)
    hops_ms: list[float] = field(default_factory=list)  # client TTFT - engine TTFT


async def _text_requests(client: httpx.AsyncClient, base: str, sim: str, count: int) -> _Text:
    ids: list[tuple[str, float]] = []
    for _ in range(count):
        rid = f"media-load-{uuid.uuid4().hex}"
        record = await stream_chat(
            client, base + "/v1/chat/completions", _text_body(), {"x-request-id": rid}
        )
        if record.ok and record.ttft is not None:
            ids.append((rid, record.ttft))
    timings = await asyncio.to_thread(fetch_engine_timings, [sim])
    found = _Text(ttft_ms=[ttft * 1000 for _, ttft in ids])
    for rid, ttft in ids:
        if (timing := timings.get(rid)) is not None:
            found.hops_ms.append((ttft - timing.wall_ttft_s) * 1000)
    return found


@dataclass(frozen=True)
class _ImageTarget:
    url: str
    body: Callable[[str], dict[str, Any]]


async def _image_requests(
    client: httpx.AsyncClient,
    target: _ImageTarget,
    image: str,
    stop: asyncio.Event,
    *,
    budget: list[int] | None = None,
    interval: float = 0.0,
) -> tuple[int, int]:
    """(sent, answered 200) until `stop` is set or the budget (requests left, shared by the
    clients in a one-item list) runs out; one request every `interval` seconds at most."""
    sent = ok = 0
    due = time.perf_counter()
    while not stop.is_set() and (budget is None or budget[0] > 0):
        if budget is not None:
            budget[0] -= 1
        response = await client.post(target.url, json=target.body(image), timeout=120)
        sent += 1
        ok += response.status_code == 200
        due += interval
        if (wait := due - time.perf_counter()) > 0:
            await asyncio.sleep(wait)
        else:
            due = time.perf_counter()  # behind: no burst to catch up
    return sent, ok


class _Cpu:
    """CPU seconds (user + system, every thread) of the gateway, the simulator and this
    client, between two reads."""

    def __init__(self, gateway: Proc, sim: Proc) -> None:
        self._procs = {"gateway": psutil.Process(gateway.popen.pid),
                       "sim": psutil.Process(sim.popen.pid)}  # fmt: skip

    def read(self) -> dict[str, float]:
        seconds = {}
        for name, proc in self._procs.items():
            times = proc.cpu_times()
            seconds[name] = float(times.user + times.system)
        seconds["client"] = time.process_time()
        return seconds

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {name: after[name] - before[name] for name in before}


def _stats(values: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(values, 50), "p95_ms": percentile(values, 95)}


@dataclass
class _Phase:
    """One kind of text phase, pooled over the rounds."""

    text: _Text = field(default_factory=_Text)
    image_requests: int = 0
    image_errors: int = 0
    seconds: float = 0.0  # wall time with the image load on
    cpu_s: dict[str, float] = field(default_factory=dict)

    def add(self, text: _Text, spent: dict[str, float]) -> None:
        self.text.ttft_ms += text.ttft_ms
        self.text.hops_ms += text.hops_ms
        for name, seconds in spent.items():
            self.cpu_s[name] = self.cpu_s.get(name, 0.0) + seconds

    def summary(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "ttft": _stats(self.text.ttft_ms),
            "hops": _stats(self.text.hops_ms),
        }
        if self.seconds:
            found["image_requests"] = self.image_requests
            found["image_errors"] = self.image_errors
            found["images_per_second"] = self.image_requests / self.seconds
        found["cpu_s"] = self.cpu_s
        found["gateway_share_of_cpu"] = self.cpu_s["gateway"] / sum(self.cpu_s.values())
        return found


@dataclass(frozen=True)
class _Setup:
    client: httpx.AsyncClient
    cpu: _Cpu
    base: str  # the gateway's base URL
    sim: str  # the simulator's base URL
    image: str  # the data URL every image request carries


async def _alone(setup: _Setup, requests: int, into: _Phase) -> None:
    before = setup.cpu.read()
    text = await _text_requests(setup.client, setup.base, setup.sim, requests)
    into.add(text, _Cpu.spent(before, setup.cpu.read()))


async def _under_load(
    setup: _Setup, target: _ImageTarget, load: tuple[int, float, int], into: _Phase
) -> None:
    """The text requests while `clients` clients send image requests at `rate` a second."""
    requests, rate, clients = load
    stop = asyncio.Event()
    senders = [
        asyncio.create_task(
            _image_requests(setup.client, target, setup.image, stop, interval=clients / rate)
        )
        for _ in range(clients)
    ]
    started = time.perf_counter()
    await asyncio.sleep(1.0)  # the image load reaches its rate
    before = setup.cpu.read()
    text = await _text_requests(setup.client, setup.base, setup.sim, requests)
    into.add(text, _Cpu.spent(before, setup.cpu.read()))
    stop.set()
    counts = await asyncio.gather(*senders)
    into.seconds += time.perf_counter() - started
    into.image_requests += sum(sent for sent, _ in counts)
    into.image_errors += sum(sent - ok for sent, ok in counts)


async def _cpu_per_image(
    setup: _Setup, target: _ImageTarget, clients: int, count: int
) -> dict[str, Any]:
    """CPU per image request of each process, `count` requests `clients` at a time."""
    budget, never = [count], asyncio.Event()
    before, started = setup.cpu.read(), time.perf_counter()
    counts = await asyncio.gather(
        *(
            _image_requests(setup.client, target, setup.image, never, budget=budget)
            for _ in range(clients)
        )
    )
    wall = time.perf_counter() - started
    spent = _Cpu.spent(before, setup.cpu.read())
    sent = sum(count for count, _ in counts)
    return {
        "image_requests": sent,
        "image_errors": sent - sum(ok for _, ok in counts),
        "per_second": sent / wall,
        "cpu_ms_per_image_request": {
            name: seconds * 1000 / max(1, sent) for name, seconds in spent.items()
        },
    }


async def _measure(
    gateway: Proc, sim: Proc, requests: int, rounds: int, load: tuple[float, int, int]
) -> dict[str, Any]:
    rate, clients, image_requests = load
    via_gateway = _ImageTarget(gateway.url + "/v1/chat/completions", _image_body)
    straight = _ImageTarget(sim.url + "/generate", _generate_body)
    image = _data_url(_encode(noise(WIDTH, HEIGHT), "PNG"))
    limits = httpx.Limits(max_connections=clients + 4)
    phases = {name: _Phase() for name in ("alone", "via_gateway", "straight_to_engine")}
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        setup = _Setup(client, _Cpu(gateway, sim), gateway.url, sim.url, image)
        await _text_requests(client, gateway.url, sim.url, 5)  # warm-up
        for target in (via_gateway, straight):
            await _image_requests(client, target, image, asyncio.Event(), budget=[2])
        images_only = await _cpu_per_image(setup, via_gateway, clients, image_requests)
        # Rounds interleave the phases, so a slow spell of a shared machine hits all three.
        paced = (requests, rate, clients)
        for _ in range(rounds):
            await _alone(setup, requests, phases["alone"])
            await _under_load(setup, via_gateway, paced, phases["via_gateway"])
            await _under_load(setup, straight, paced, phases["straight_to_engine"])
    result: dict[str, Any] = {
        "requests": requests,
        "rounds": rounds,
        "image_rate": rate,
        "image_clients": clients,
        "image_bytes": len(image),
        "images_only": images_only,
        **{name: phase.summary() for name, phase in phases.items()},
    }
    alone = phases["alone"]
    result["alone"]["gateway_cpu_ms_per_text_request"] = (
        alone.cpu_s["gateway"] * 1000 / max(1, len(alone.text.ttft_ms))
    )
    for phase in ("via_gateway", "straight_to_engine"):
        for kind in ("ttft", "hops"):
            for stat in ("p50_ms", "p95_ms"):
                ratio = result[phase][kind][stat] / result["alone"][kind][stat]
                result[phase][kind][f"ratio_{stat[:3]}"] = ratio
    return result


def _split_cpus(cpus: set[int]) -> tuple[set[int], set[int]] | None:
    """(the gateway's CPUs, everyone else's): half each, the gateway's half rounded down; None
    with fewer than 2 CPUs."""
    ordered = sorted(cpus)
    if len(ordered) < 2:
        return None
    half = len(ordered) // 2
    return set(ordered[:half]), set(ordered[half:])


def _pin(pid: int, cpus: set[int]) -> None:
    # Affinity is per thread on Linux: every thread the process has now; later ones inherit.
    for thread in psutil.Process(pid).threads():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(thread.id, cpus)


@contextlib.contextmanager
def _pinned(gateway: Proc, sim: Proc, pin: bool) -> Iterator[dict[str, list[int]] | None]:
    if not pin or not hasattr(os, "sched_setaffinity"):
        yield None
        return
    mine = os.sched_getaffinity(0)
    split = _split_cpus(mine)
    if split is None:
        yield None
        return
    own, rest = split
    _pin(gateway.popen.pid, own)
    _pin(sim.popen.pid, rest)
    os.sched_setaffinity(0, rest)
    try:
        yield {"gateway": sorted(own), "sim_and_client": sorted(rest)}
    finally:
        os.sched_setaffinity(0, mine)


def measure(
    requests: int,
    rounds: int = 3,
    image_rate: float = 3.0,
    image_clients: int = 2,
    image_requests: int = 40,
    pin: bool = False,
) -> dict[str, Any]:
    load = (image_rate, image_clients, image_requests)
    sim = start_sim("--tool-calls", "0")
    try:
        gateway = start_gateway([sim.url])
        try:
            with _pinned(gateway, sim, pin) as cpus:
                result = asyncio.run(_measure(gateway, sim, requests, rounds, load))
            result["cpus"] = cpus
            return result
        finally:
            gateway.stop()
    finally:
        sim.stop()


def _markdown(result: dict[str, Any]) -> str:
    alone, images = result["alone"], result["images_only"]
    via, direct = result["via_gateway"], result["straight_to_engine"]
    per_image = images["cpu_ms_per_image_request"]
    cpus = result["cpus"]
    pinning = "no pinning"
    if cpus:
        pinning = f"gateway on CPUs {cpus['gateway']}, simulator and client on "
        pinning += str(cpus["sim_and_client"])
    lines = [
        "## Text TTFT while images are checked",
        "",
        f"{result['rounds']} rounds of {result['requests']} streaming text requests alone, then "
        f"while image requests ({WIDTH}x{HEIGHT} noise PNG, {result['image_bytes']:,} bytes of "
        f"data URL) arrive at {result['image_rate']:g}/s through the gateway, then at the same "
        f"rate straight to the engine ({pinning}); each phase's requests pooled over the "
        "rounds. Hops: client TTFT minus the engine's own arrival-to-first-token. Ratios "
        "against alone.",
        "",
        "| text requests | images/s | TTFT p50 ms | TTFT p95 ms | hops p50 ms | hops p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, phase in (("alone", alone), ("images via the gateway", via),
                        ("images straight to the engine", direct)):  # fmt: skip
        ttft, hops = phase["ttft"], phase["hops"]
        rate = f"{phase['images_per_second']:.1f}" if "images_per_second" in phase else "0"

        def cell(stats: dict[str, float], stat: str) -> str:
            ratio = stats.get(f"ratio_{stat[:3]}")
            return f"{stats[stat]:.2f}" + (f" ({ratio:.2f}x)" if ratio is not None else "")

        lines.append(
            f"| {name} | {rate} | {cell(ttft, 'p50_ms')} | {cell(ttft, 'p95_ms')} | "
            f"{cell(hops, 'p50_ms')} | {cell(hops, 'p95_ms')} |"
        )
    errors = images["image_errors"] + via["image_errors"] + direct["image_errors"]
    lines += [
        "",
        f"The gateway's share of the added text TTFT (via the gateway minus straight to the "
        f"engine): p50 {via['ttft']['p50_ms'] - direct['ttft']['p50_ms']:+.2f} ms, p95 "
        f"{via['ttft']['p95_ms'] - direct['ttft']['p95_ms']:+.2f} ms. CPU per image request "
        f"({images['image_requests']} alone, {images['per_second']:.1f}/s): gateway "
        f"{per_image['gateway']:.1f} ms, simulator {per_image['sim']:.1f} ms, client "
        f"{per_image['client']:.1f} ms; per text request the gateway spent "
        f"{alone['gateway_cpu_ms_per_text_request']:.1f} ms. With images via the gateway it "
        f"used {via['gateway_share_of_cpu']:.0%} of the CPU the three processes spent "
        f"({direct['gateway_share_of_cpu']:.0%} with them straight to the engine). Image "
        f"requests that failed: {errors}.",
    ]
    return "\n".join(lines) + "\n"


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    result = measure(requests=60, rounds=3)
    (out_dir / "media-load.json").write_text(json.dumps(result, indent=2) + "\n")
    return _markdown(result)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench media-load", description=__doc__)
    parser.add_argument("--requests", type=int, default=60, help="text requests per phase")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three phases")
    parser.add_argument("--image-rate", type=float, default=3.0, help="image requests a second")
    parser.add_argument("--image-clients", type=int, default=2, help="image requests in flight")
    parser.add_argument("--image-requests", type=int, default=40, help="for the CPU per image")
    parser.add_argument("--pin", action="store_true", help="give the gateway CPUs of its own")
    parser.add_argument("--out", type=Path, default=None, help="also write the result as JSON")
    args = parser.parse_args(argv)
    result = measure(
        args.requests,
        args.rounds,
        args.image_rate,
        args.image_clients,
        args.image_requests,
        args.pin,
    )
    print(_markdown(result))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "media-load.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0
