"""A prefill batch that holds an image takes the hybrid route (MEDIA.md 2.5), plus the vision
tower and preprocessing: read from the simulator's own timing report (meta_info.sim, reference
seconds) and the performance model, never from the wall clock."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from engine.sim.engine import SimEngine
from engine.sim.images import size_image
from engine.sim.perf import PerfModel
from engine.sim.profile import ImageProfile, load_profile
from engine.sim.requests import parse_generate
from engine.sim.settings import SimSettings
from engine.sim.state import SimRequest
from tests.engine.sim.helpers import IMAGE_MARKER, generate, png_url
from tests.support.procs import Proc

PROFILE = load_profile()
assert PROFILE.images is not None
IMAGES: ImageProfile = PROFILE.images
RESTORE_S = PROFILE.checkpoint_restore_seconds


def vision_s(tokens: int) -> float:
    patches = 4 * tokens
    a, b = IMAGES.vision_seconds_per_patch, IMAGES.vision_seconds_per_patch_squared
    return a * patches + b * patches * patches


def preprocess_s(width: int, height: int) -> float:
    return IMAGES.preprocess_seconds_per_megapixel * width * height / 1e6


def image_prompt() -> str:
    # A fresh prefix per test: the shared simulator keeps earlier tests' checkpoints.
    return f"[gMASK]<sop><|user|>{uuid.uuid4().hex}{IMAGE_MARKER}What is this?<|assistant|>"


def meta_of(url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = generate(url, {"sampling_params": {"max_new_tokens": 8}, **body})
    assert response.status_code == 200, response.text
    meta: dict[str, Any] = response.json()["meta_info"]
    return meta


def test_an_image_request_prefills_on_the_hybrid_route(sim: Proc) -> None:
    meta = meta_of(sim.url, {"text": image_prompt(), "image_data": [png_url(1920, 1080)]})
    model, tokens = meta["sim"], meta["prompt_tokens"]
    assert meta["cached_tokens"] == 0
    assert model["prefill_path"] == "hybrid"
    assert model["image_tokens"] == [2691]
    assert model["vision_s"] == pytest.approx(vision_s(2691), rel=1e-4)
    assert model["preprocess_s"] == pytest.approx(preprocess_s(1920, 1080), rel=1e-4)
    hybrid = tokens / IMAGES.hybrid_tokens_per_second
    assert model["prefill_s"] == pytest.approx(
        hybrid + model["vision_s"] + model["preprocess_s"], rel=1e-4
    )
    # The same number of text tokens costs the layer-wise floor: ~3x less.
    same = httpx.get(sim.url + "/sim/model", params={"prompt_tokens": tokens}).json()
    assert same["prefill_s"] == pytest.approx(PROFILE.prefill_floor_seconds)
    assert same["hybrid_prefill_s"] == pytest.approx(hybrid)
    assert model["prefill_s"] > 3 * same["prefill_s"]
    # A text request reports the layer-wise route and no image time.
    text = meta_of(sim.url, {"text": f"{uuid.uuid4().hex} plain text"})["sim"]
    assert (text["prefill_path"], text["vision_s"], text["preprocess_s"]) == ("layerwise", 0, 0)


def test_a_turn_whose_cache_covers_the_image_skips_the_tower_not_the_route(sim: Proc) -> None:
    image = png_url(640, 480)
    # Long enough after the image that a checkpoint boundary falls past it.
    first_text = image_prompt() + "context " * 200
    first = generate(sim.url, {"text": first_text, "image_data": [image]}).json()
    second_text = first_text + first["text"] + "<|user|>And now?<|assistant|>"
    meta = meta_of(sim.url, {"text": second_text, "image_data": [image]})
    model = meta["sim"]
    assert meta["cached_tokens"] > first["meta_info"]["prompt_tokens"] - PROFILE.track_interval
    assert meta["cached_tokens"] > 391 + 20  # past the image's tokens
    assert model["prefill_path"] == "hybrid"
    assert model["vision_s"] == 0
    uncached = meta["prompt_tokens"] - meta["cached_tokens"]
    expected = uncached / IMAGES.hybrid_tokens_per_second + RESTORE_S + preprocess_s(640, 480)
    assert model["prefill_s"] == pytest.approx(expected, rel=1e-4)


async def _run_together(engine: SimEngine, requests: list[SimRequest]) -> None:
    for req in requests:
        engine.scheduler.submit(req)
    # Submitted before the loop starts: the first admission takes them as one batch.
    engine.scheduler.start()
    try:
        async with asyncio.timeout(10):
            for req in requests:
                while not req.done:
                    req.changed.clear()
                    await req.changed.wait()
    finally:
        await engine.scheduler.stop()


async def test_a_text_request_batched_with_an_image_request_goes_hybrid_too() -> None:
    engine = SimEngine(SimSettings(profile=PROFILE, time_scale=1e-5))
    image_params = parse_generate(
        {
            "text": image_prompt(),
            "image_data": png_url(1280, 720),
            "sampling_params": {"max_new_tokens": 1},
        }
    )
    image_req = engine.create_request(image_params, await engine.load_images(image_params))
    text_req = engine.create_request(
        parse_generate({"text": "plain " * 500, "sampling_params": {"max_new_tokens": 1}})
    )
    await _run_together(engine, [image_req, text_req])
    image_model, text_model = (req.model.summary(1.0) for req in (image_req, text_req))
    assert image_model["prefill_path"] == text_model["prefill_path"] == "hybrid"
    tokens = image_req.prompt_tokens + text_req.prompt_tokens
    expected = tokens / IMAGES.hybrid_tokens_per_second + vision_s(1196) + preprocess_s(1280, 720)
    # One forward: both wait for all of it.
    assert image_model["prefill_s"] == text_model["prefill_s"] == pytest.approx(expected, rel=1e-4)
    assert (text_model["vision_s"], text_model["image_tokens"]) == (0, [])


def test_perf_model_hybrid_rules() -> None:
    perf = PerfModel(PROFILE)
    rate = IMAGES.hybrid_tokens_per_second
    # MEDIA.md 5.2's worked example: a cold 30k prompt with one 1080p image at KT's max_pixels.
    assert perf.hybrid_prefill_seconds(30_000 + 779) == pytest.approx(237, rel=0.01)
    assert perf.hybrid_prefill_seconds(2000, 1000) == pytest.approx(1000 / rate + RESTORE_S)
    # A batch shares one pass: the sum of its uncached tokens at the hybrid rate.
    both = perf.prefill_batch_seconds([(1000, 0), (3000, 2000)], hybrid=True)
    assert both == pytest.approx(2000 / rate + RESTORE_S)
    # MEDIA.md 5.1's estimates: 20-40 ms for ~800 tokens, 0.2-0.4 s for ~4,000.
    assert 0.02 <= perf.vision_seconds([4 * 777]) <= 0.04
    assert 0.2 <= perf.vision_seconds([4 * 3942]) <= 0.4
    image = size_image(1920, 1080, b"", 6_272_000)
    assert perf.image_seconds([image], cached_tokens=0, images_end=3000)[1] > 0
    assert perf.image_seconds([image], cached_tokens=3000, images_end=3000)[1] == 0
