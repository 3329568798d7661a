"""Text requests' TTFT while image requests are being checked, through gateway + simulator.

The media stage checks images in worker threads (a 1080p noise PNG is ~60 ms of CPU): this
measures whether that work delays text requests on the same gateway. One run: the same
sequence of streaming text requests alone, then while `--image-clients` clients keep sending
1080p noise-PNG requests; TTFT p50/p95 of the text requests and the ratios, in one process pair.

    python -m bench media-load [--requests N] [--image-clients K]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.client import stream_chat
from bench.media import _data_url, _encode, photo
from bench.procs import start_gateway, start_sim
from bench.stats import percentile

MODEL = "glm-5.3-flash"


def _text_body() -> dict[str, Any]:
    prompt = f"Text request {uuid.uuid4().hex}: say something short."
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 64}


def _image_body(url: str) -> dict[str, Any]:
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "?"}]
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 8}


async def _text_ttfts(client: httpx.AsyncClient, url: str, requests: int) -> list[float]:
    ttfts = []
    for _ in range(requests):
        record = await stream_chat(client, url, _text_body())
        if record.ok and record.ttft is not None:
            ttfts.append(record.ttft * 1000)
    return ttfts


async def _image_load(client: httpx.AsyncClient, url: str, image: str, stop: asyncio.Event) -> int:
    sent = 0
    while not stop.is_set():
        await client.post(url, json=_image_body(image), timeout=120)
        sent += 1
    return sent


async def _measure(gateway_url: str, requests: int, image_clients: int) -> dict[str, Any]:
    url = gateway_url + "/v1/chat/completions"
    image = _data_url(_encode(photo(1920, 1080), "PNG"))
    limits = httpx.Limits(max_connections=image_clients + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await _text_ttfts(client, url, 5)  # warm-up
        alone = await _text_ttfts(client, url, requests)
        stop = asyncio.Event()
        load = [
            asyncio.create_task(_image_load(client, url, image, stop)) for _ in range(image_clients)
        ]
        await asyncio.sleep(0.5)
        loaded = await _text_ttfts(client, url, requests)
        stop.set()
        images = sum(await asyncio.gather(*load))
    result: dict[str, Any] = {
        "requests": requests,
        "image_clients": image_clients,
        "image_requests": images,
        "image_bytes": len(image),
    }
    for name, values in (("alone", alone), ("under_image_load", loaded)):
        result[name] = {"p50_ms": percentile(values, 50), "p95_ms": percentile(values, 95)}
    for stat in ("p50_ms", "p95_ms"):
        result[f"ratio_{stat[:3]}"] = result["under_image_load"][stat] / result["alone"][stat]
    return result


def measure(requests: int, image_clients: int) -> dict[str, Any]:
    sim = start_sim("--tool-calls", "0")
    try:
        gateway = start_gateway([sim.url])
        try:
            return asyncio.run(_measure(gateway.url, requests, image_clients))
        finally:
            gateway.stop()
    finally:
        sim.stop()


def _markdown(result: dict[str, Any]) -> str:
    alone, loaded = result["alone"], result["under_image_load"]
    return (
        "## Text TTFT while images are checked\n\n"
        f"{result['requests']} streaming text requests alone, then while "
        f"{result['image_clients']} clients send 1920x1080 noise-PNG requests "
        f"({result['image_requests']} sent, {result['image_bytes']:,} bytes of data URL each):\n\n"
        "| | TTFT p50 ms | TTFT p95 ms |\n|---|---|---|\n"
        f"| alone | {alone['p50_ms']:.2f} | {alone['p95_ms']:.2f} |\n"
        f"| under image load | {loaded['p50_ms']:.2f} | {loaded['p95_ms']:.2f} |\n"
        f"| ratio | {result['ratio_p50']:.2f} | {result['ratio_p95']:.2f} |\n"
    )


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    result = measure(requests=60, image_clients=2)
    (out_dir / "media-load.json").write_text(json.dumps(result, indent=2) + "\n")
    return _markdown(result)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench media-load", description=__doc__)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--image-clients", type=int, default=2)
    args = parser.parse_args(argv)
    print(_markdown(measure(args.requests, args.image_clients)))
    return 0
