"""Checkpoint keys with images (MEDIA.md 3.5): image tokens are keyed by a hash of the
request's images, one hash for all of them, so a turn that adds an image loses the cache from
the first earlier image on; with SGLANG_ENABLE_MM_SPLITTING (profile mm_splitting) only from
the new image on."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.sim.profile import DEFAULT_PROFILE
from tests.engine.sim.helpers import IMAGE_MARKER, data_url, generate, image_bytes, png_url
from tests.support.procs import Proc, start_sim

INTERVAL = 16
FLAGS = ("--track-interval", str(INTERVAL), "--checkpoint-slots", "64")
SYSTEM = "[gMASK]<sop><|system|>" + "You look at screenshots. " * 20
A = png_url(224, 224, (200, 30, 30))  # 64 tokens
B = png_url(320, 240, (30, 200, 30))


def _start(tmp: Path | None, splitting: bool) -> Proc:
    if not splitting:
        return start_sim(*FLAGS, name="image-cache")
    assert tmp is not None
    doc = yaml.safe_load(DEFAULT_PROFILE.read_text())
    doc["images"]["mm_splitting"] = True
    profile = tmp / "split.yaml"
    profile.write_text(yaml.safe_dump(doc))
    return start_sim(*FLAGS, "--profile", str(profile), name="image-cache-split")


@pytest.fixture(scope="module")
def bundled() -> Iterator[Proc]:
    proc = _start(None, splitting=False)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    proc = _start(tmp_path_factory.mktemp("profiles"), splitting=True)
    try:
        yield proc
    finally:
        proc.stop()


@dataclass
class Session:
    """A conversation whose turns extend each other, as a gateway re-renders it."""

    url: str
    text: str
    images: list[str] = field(default_factory=list)

    def turn(self, user: str, *new_images: str) -> dict[str, Any]:
        self.text += "<|user|>" + "".join(IMAGE_MARKER for _ in new_images) + user
        self.text += "<|assistant|>"
        self.images += new_images
        body: dict[str, Any] = {"text": self.text, "sampling_params": {"max_new_tokens": 40}}
        if self.images:
            body["image_data"] = self.images
        response = generate(self.url, body)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        self.text += result["text"]
        meta: dict[str, Any] = result["meta_info"]
        return meta


def _tokens_before_first_image(session: Session) -> int:
    before = session.text.split("<|image|>")[0]
    return -(-len(before.encode()) // 4)


def _session(url: str, name: str) -> Session:
    return Session(url, SYSTEM + name)


def test_text_before_the_first_image_hits_as_text(bundled: Proc) -> None:
    session = _session(bundled.url, "text-first")
    session.turn("Hello, I will send a screenshot next. " * 4)
    with_image = session.turn("Here it is.", A)
    assert with_image["cached_tokens"] > 0
    assert with_image["cached_tokens"] <= _tokens_before_first_image(session)


def test_same_images_hit_past_them_and_a_new_one_falls_back(bundled: Proc) -> None:
    session = _session(bundled.url, "bundle")
    first = session.turn("Hello. " * 10)
    second = session.turn("What is in this picture? " * 4, A)
    image_start = _tokens_before_first_image(session)
    assert 0 < second["cached_tokens"] <= image_start
    third = session.turn("Tell me more about it. " * 4)
    # The same image keys the same: the whole previous turn is cached, image included.
    assert third["cached_tokens"] > image_start + 64
    assert third["sim"]["vision_s"] == 0
    fourth = session.turn("And this one?", B)
    # One hash for A and B: A's tokens key differently now; back to the text before A.
    assert fourth["cached_tokens"] <= image_start
    assert fourth["cached_tokens"] == second["cached_tokens"]
    assert fourth["sim"]["vision_s"] > 0
    assert first["cached_tokens"] == 0


def test_splitting_keeps_earlier_images(split: Proc) -> None:
    session = _session(split.url, "split")
    session.turn("Hello. " * 10)
    session.turn("What is in this picture? " * 4, A)
    third = session.turn("Tell me more about it. " * 4)
    fourth = session.turn("And this one?", B)
    assert fourth["cached_tokens"] >= third["prompt_tokens"]


def test_keys_follow_the_pixels_not_the_encoding(bundled: Proc) -> None:
    # The engine hashes the processed pixels: the same pixels in another lossless format key
    # the same; other pixels of the same size do not.
    pixels = (10, 20, 30)
    session = _session(bundled.url, "pixels")
    session.turn("Look. " * 30, png_url(224, 224, pixels))
    image_start = _tokens_before_first_image(session)
    follow_up = session.text + "<|user|>More.<|assistant|>"

    def cached(image: str) -> int:
        body = {"text": follow_up, "image_data": [image], "sampling_params": {"max_new_tokens": 1}}
        return int(generate(bundled.url, body).json()["meta_info"]["cached_tokens"])

    assert cached(png_url(224, 224, (11, 20, 30))) <= image_start
    assert (
        cached(data_url(image_bytes(224, 224, pixels, fmt="BMP"), "image/bmp")) > image_start + 64
    )
