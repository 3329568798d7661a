"""`python -m bench images-device` (the GPU host's image checks) run against the simulator and a
gateway on loopback: its plumbing, with what the simulator can show honestly.

The simulator expands images with the engine's resize rule (engine/sim/images.py, its own
implementation), so step a must measure the gateway's formula for every size; it models the
hybrid prefill rate, so step b's probe must recover the profile's rate. It sees no colours, so
step c runs with --skip-colour; a tap between the gateway and the simulator shows that the
gateway sent the images in the order the template renders the tool results (call_a's first),
not the order of the request's messages (call_b's first).
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from PIL import Image
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from bench.images_colour import COLOURS
from engine.sim.images import image_tokens as sim_image_tokens
from engine.sim.profile import DEFAULT_PROFILE, MAX_PIXELS, load_profile
from tests.support.procs import REPO_ROOT, Proc, free_port, start_gateway, start_sim

# Slow enough that modelled prefill times stand out of loopback noise, fast enough for seconds.
TIME_SCALE = 0.01
RUN_TIMEOUT_S = 120


class Tap:
    """A pass-through proxy in front of the simulator that keeps every /generate body."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.generate_bodies: list[dict[str, Any]] = []
        self.port = free_port()
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=["GET", "POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Tap:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the tap did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    async def _forward(self, request: Request) -> StreamingResponse:
        body = await request.body()
        if request.url.path == "/generate":
            self.generate_bodies.append(json.loads(body))
        client = httpx.AsyncClient(timeout=httpx.Timeout(60.0))
        upstream = client.build_request(
            request.method,
            self.upstream + request.url.path,
            params=request.query_params,
            content=body,
            headers={"content-type": request.headers.get("content-type", "application/json")},
        )
        response = await client.send(upstream, stream=True)

        async def close() -> None:
            await response.aclose()
            await client.aclose()

        headers = {
            k: v for k, v in response.headers.items() if k.lower() in {"content-type", "x-sim-name"}
        }
        return StreamingResponse(
            response.aiter_raw(), response.status_code, headers, background=BackgroundTask(close)
        )


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    # No tool calls: step c's answers are text, as a model's would be.
    proc = start_sim("--tool-calls", "0", time_scale=TIME_SCALE)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def tap(sim: Proc) -> Iterator[Tap]:
    with Tap(sim.url) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def gateway(tap: Tap) -> Iterator[Proc]:
    env = {"FLASHBOX_API_KEYS": "", "FLASHBOX_HEALTH__INTERVAL_S": "0.2"}
    proc = start_gateway([tap.url], env=env)
    try:
        yield proc
    finally:
        proc.stop()


def run_suite(out_dir: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    """`python -m bench images-device ARGS` as device-checks.sh runs it: (status, output, JSON)."""
    out = out_dir / "images.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "images-device", *args, "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    result = json.loads(out.read_text()) if out.exists() else {}
    return done.returncode, done.stdout + done.stderr, result


def colour_of(data_url: str) -> str:
    image = Image.open(io.BytesIO(base64.b64decode(data_url.split(",", 1)[1]))).convert("RGB")
    pixel = image.getpixel((image.width // 2, image.height // 2))
    return next(name for name, rgb in COLOURS.items() if rgb == pixel)


def test_the_device_suite_passes_against_the_simulator(
    sim: Proc, tap: Tap, gateway: Proc, tmp_path: Path
) -> None:
    tap.generate_bodies.clear()
    code, output, result = run_suite(
        tmp_path, "--engine", sim.url, "--gateway", gateway.url, "--skip-colour", "--repeats", "2"
    )
    assert code == 0, output
    assert result["ok"] == {"tokens": True, "vision": True, "colour": True}, output
    assert result["info"]["simulator"] is True

    # a: every size measured as the gateway's formula, which is the simulator's own rule;
    # one size is over the engine's max_pixels (the resize rule scaled it down).
    rows = result["tokens"]
    assert len(rows) == 6
    for row in rows:
        expected = sim_image_tokens(row["width"], row["height"], MAX_PIXELS)
        assert row["measured_tokens"] == row["expected_tokens"] == expected, row
    assert any(row["over_max_pixels"] for row in rows)
    assert "### a. Prompt tokens per image size: PASS" in output

    # b: TTFTs per size and repeat; the probe recovers the profile's hybrid rate.
    for row in rows:
        assert len(row["ttft_text_s"]) == len(row["ttft_image_s"]) == 2
    calibration = result["calibration"]
    rate = load_profile(DEFAULT_PROFILE).images.hybrid_tokens_per_second  # type: ignore[union-attr]
    assert calibration["hybrid_tokens_per_second"] == pytest.approx(rate, rel=0.25)
    assert set(calibration["vision_s"]) == {f"{r['width']}x{r['height']}" for r in rows}
    assert "tokens_per_second:" in result["profile_snippet"]
    assert "```yaml" in output

    # c: both cases answered through the gateway with both images' tokens counted...
    cases = result["colour"]
    assert [(c["call_a"], c["status"], c["verdict"]) for c in cases] == [
        ("red", 200, "not judged"),
        ("blue", 200, "not judged"),
    ]
    # ...and the gateway sent call_a's image first, as the template shows the results,
    # although the request lists call_b's result first.
    sent = [b["image_data"] for b in tap.generate_bodies if len(b.get("image_data") or []) == 2]
    assert [[colour_of(url) for url in images] for images in sent] == [
        ["red", "blue"],
        ["blue", "red"],
    ]


def test_without_a_gateway_the_colour_test_is_skipped(sim: Proc, tmp_path: Path) -> None:
    code, output, result = run_suite(
        tmp_path,
        "--engine",
        sim.url,
        "--repeats",
        "1",
        "--sizes",
        "224x224,640x480",
        "--probe-words",
        "200",
    )
    assert code == 0, output
    assert result["colour"] is None
    assert "colour test: skipped" in output
    assert "GATEWAY_URL" in output


def test_an_engine_that_cannot_be_reached_fails_the_run(tmp_path: Path) -> None:
    code, output, _ = run_suite(
        tmp_path, "--engine", f"http://127.0.0.1:{free_port()}", "--timeout", "5"
    )
    assert code == 1
    assert "cannot serve an image request" in output
