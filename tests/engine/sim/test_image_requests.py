"""POST /generate with image_data as sglang-kt 0.7.2 takes it: token counts from the real image
size, the engine's checks and wording, bad data, model and server info, /tokenize text-only."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from engine.sim.profile import DEFAULT_PROFILE
from tests.engine.sim.helpers import (
    IMAGE_MARKER,
    data_url,
    generate,
    image_bytes,
    png_url,
    sse_events,
)
from tests.support.procs import Proc, start_sim

# 40 bytes: with it the text before each image is whole 4-byte tokens, so prompt_tokens is
# exactly the text's tokens (placeholders left out) plus the images' tokens.
HEAD = "[gMASK]<sop><|user|>xx"
QUESTION = "What is in this image?<|assistant|>"
SIZES = [((28, 28), 9), ((224, 224), 64), ((640, 480), 391), ((1920, 1080), 2691)]
SIZES += [((4032, 3024), 3942), ((8000, 100), 1144)]


def prompt(images: int) -> str:
    return HEAD + "".join(IMAGE_MARKER + "abcdef" for _ in range(images)) + QUESTION


def text_tokens(text: str) -> int:
    return -(-len(text.replace("<|image|>", "").encode()) // 4)


def body(text: str, images: Any, **extra: Any) -> dict[str, Any]:
    return {"text": text, "image_data": images, "sampling_params": {"max_new_tokens": 4}, **extra}


def error_of(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    message: str = response.json()["error"]["message"]
    return message


@pytest.mark.parametrize(("size", "tokens"), SIZES, ids=[f"{w}x{h}" for (w, h), _ in SIZES])
def test_prompt_tokens_include_each_images_tokens(
    sim: Proc, size: tuple[int, int], tokens: int
) -> None:
    text = prompt(1)
    meta = generate(sim.url, body(text, png_url(*size))).json()["meta_info"]
    assert meta["prompt_tokens"] == text_tokens(text) + tokens
    assert meta["sim"]["image_tokens"] == [tokens]


def test_several_images_in_order_and_a_bare_string(sim: Proc) -> None:
    text = prompt(3)
    images = [png_url(224, 224), png_url(28, 28), png_url(640, 480)]
    meta = generate(sim.url, body(text, images)).json()["meta_info"]
    assert meta["sim"]["image_tokens"] == [64, 9, 391]
    assert meta["prompt_tokens"] == text_tokens(text) + 64 + 9 + 391
    # One image may come as a bare string, as the engine wraps it in a list.
    single = generate(sim.url, body(prompt(1), png_url(224, 224))).json()
    assert single["meta_info"]["sim"]["image_tokens"] == [64]


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP", "GIF", "BMP"])
def test_any_format_pillow_reads(sim: Proc, fmt: str) -> None:
    # The engine checks no media type: whatever Pillow opens is an image.
    url = data_url(image_bytes(640, 480, fmt=fmt), "application/octet-stream")
    meta = generate(sim.url, body(prompt(1), [url])).json()["meta_info"]
    assert meta["sim"]["image_tokens"] == [391]


def test_raw_base64_and_input_ids(sim: Proc) -> None:
    raw = base64.b64encode(image_bytes(224, 224)).decode()
    meta = generate(sim.url, body(prompt(1), [raw])).json()["meta_info"]
    assert meta["sim"]["image_tokens"] == [64]
    # input_ids: the placeholder is the image token id.
    ids = [1, 2, 154830, 154854, 154831, 3]
    by_ids = generate(
        sim.url,
        {
            "input_ids": ids,
            "image_data": [png_url(224, 224)],
            "sampling_params": {"max_new_tokens": 2},
        },
    )
    assert by_ids.json()["meta_info"]["prompt_tokens"] == len(ids) - 1 + 64


def test_empty_image_data_is_a_text_request(sim: Proc) -> None:
    for empty in ([], [None], None):
        meta = generate(sim.url, body(prompt(1), empty)).json()["meta_info"]
        assert meta["sim"]["image_tokens"] == []
        assert meta["sim"]["prefill_path"] == "layerwise"


@pytest.mark.parametrize(
    ("text", "count", "placeholders"),
    [(prompt(2), 1, 2), ("[gMASK]<sop><|user|>hi<|assistant|>", 1, 0), (prompt(1), 2, 1)],
)
def test_placeholder_count_must_match(sim: Proc, text: str, count: int, placeholders: int) -> None:
    images = [png_url(28, 28)] * count
    message = error_of(generate(sim.url, body(text, images)))
    assert message == (
        "GLM-5-Next image count/placeholder count mismatch: "
        f"images={count}, placeholders={placeholders}."
    )


def test_engine_errors_arrive_in_the_stream_when_streaming(sim: Proc) -> None:
    # SGLang's streaming /generate has answered 200 before the ValueError is raised.
    response = generate(sim.url, body(prompt(2), [png_url(28, 28)], stream=True))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    assert events[0] == {
        "error": {
            "message": "GLM-5-Next image count/placeholder count mismatch: "
            "images=1, placeholders=2."
        }
    }


def test_at_most_eight_images(sim: Proc) -> None:
    eight = generate(sim.url, body(prompt(8), [png_url(28, 28)] * 8))
    assert eight.status_code == 200
    assert eight.json()["meta_info"]["sim"]["image_tokens"] == [9] * 8
    nine = generate(sim.url, body(prompt(9), [png_url(28, 28)] * 9))
    assert error_of(nine) == "GLM-5-Next accepts at most 8 images per request; got 9."


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"audio_data": "data:audio/wav;base64,AAAA"}, "GLM-5-Next does not support audio input."),
        (
            {"video_data": "data:video/mp4;base64,AAAA"},
            "GLM-5-Next requests cannot mix image and video content.",
        ),
        (
            {"image_data": [{"format": "processor_output"}]},
            "GLM-5-Next does not accept processor_output or precomputed_embedding image inputs.",
        ),
        (
            {"text": prompt(1) + "<|video|>"},
            "GLM-5-Next image request unexpectedly contains a video placeholder.",
        ),
    ],
    ids=["audio", "image and video", "dict item", "video placeholder"],
)
def test_the_engines_other_refusals(sim: Proc, extra: dict[str, Any], message: str) -> None:
    assert error_of(generate(sim.url, {**body(prompt(1), [png_url(28, 28)]), **extra})) == message


def test_video_alone_is_refused_by_the_simulator(sim: Proc) -> None:
    text = "[gMASK]<sop><|user|><|begin_of_video|><|video|><|end_of_video|>hi<|assistant|>"
    response = generate(sim.url, {"text": text, "video_data": "data:video/mp4;base64,AAAA"})
    assert "does not model video" in error_of(response)


def test_aspect_ratio_over_200(sim: Proc) -> None:
    response = generate(sim.url, body(prompt(1), [png_url(3000, 10)]))
    # 3000x10 is first scaled up to 28 high (8400x28): 300:1.
    assert error_of(response) == "absolute aspect ratio must be smaller than 200, got 300.0"
    # 200:1 exactly is fine.
    assert generate(sim.url, body(prompt(1), [png_url(5600, 28)])).status_code == 200


TRUNCATED = data_url(image_bytes(640, 480, colour=(1, 2, 3), fmt="JPEG")[:400])
BAD_DATA = [
    ("not base64", "data:image/png;base64,!!!!", "Only base64 data is allowed"),
    ("not an image", data_url(b"hello, this is not an image"), "cannot identify image file"),
    ("truncated", TRUNCATED, "Truncated File Read"),
    ("no comma", "data:image/png;base64", "list index out of range"),
    # load_image opens any string ending like an image file name as a local path, before it
    # looks for `data:` (MEDIA.md 3.2).
    ("ends like a path", "data:image/png;base64,AAAApng", "No such file or directory"),
    ("long, ends like a path", "data:image/png;base64," + "A" * 5000 + "gif", "File name too long"),
    ("bare base64, ends like a path", "AAAAjpeg", "No such file or directory"),
]


@pytest.mark.parametrize(("case", "url", "cause"), BAD_DATA, ids=[c for c, _, _ in BAD_DATA])
def test_undecodable_images_fail_as_the_engine_fails(
    sim: Proc, case: str, url: str, cause: str
) -> None:
    # SGLang does not catch the RuntimeError of a failed load: a 500 (its body says only
    # "Internal Server Error"; the simulator's carries the engine's log message, elided).
    response = generate(sim.url, body(prompt(2), [png_url(28, 28), url]))
    message = error_of(response, 500)
    assert message.startswith(
        "An exception occurred while loading IMAGE data at index 1: Error while loading data "
    )
    assert cause in message
    assert len(message) < 600  # the image string is elided


def test_undecodable_image_cuts_the_stream(sim: Proc) -> None:
    request = body(prompt(1), [BAD_DATA[1][1]], stream=True)
    with httpx.stream("POST", sim.url + "/generate", json=request, timeout=10) as response:
        assert response.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            response.read()
    assert httpx.get(sim.url + "/health").status_code == 200


@pytest.mark.parametrize(
    "url",
    ["https://example.com/cat.png", "http://10.0.0.1/x", "file:///etc/passwd", "/srv/images/x.png"],
)
def test_the_simulator_never_fetches_nor_reads_files(sim: Proc, url: str) -> None:
    message = error_of(generate(sim.url, body(prompt(1), [url])))
    assert "simulator does not" in message


@pytest.mark.parametrize("images", [5, ["a", 3], [["nested"]]])
def test_wrong_types(sim: Proc, images: Any) -> None:
    assert error_of(generate(sim.url, body(prompt(1), images)))


def test_model_info_and_server_info(sim: Proc) -> None:
    for path in ("/model_info", "/get_model_info"):
        info = httpx.get(sim.url + path).json()
        assert info["has_image_understanding"] is True
        assert info["has_audio_understanding"] is False
    server = httpx.get(sim.url + "/server_info").json()
    # The engine's server args, as launched without image flags.
    assert server["mm_process_config"] == {}
    assert server["limit_mm_data_per_request"] is None


def test_tokenize_is_text_only(sim: Proc) -> None:
    # The engine's /tokenize takes no images; the placeholder is text like any other.
    text = prompt(1)
    answer = httpx.post(sim.url + "/tokenize", json={"prompt": text}).json()
    assert answer["count"] == -(-len(text.encode()) // 4)


@pytest.fixture(scope="module")
def kt_sim() -> Iterator[Proc]:
    """The engine as KT's tutorial launches it, with a small context."""
    proc = start_sim(
        "--mm-process-config",
        '{"image": {"max_pixels": 1254400}}',
        "--limit-mm-data-per-request",
        '{"image": 3, "video": 1}',
        "--context-length",
        "2000",
        name="kt-images",
    )
    try:
        yield proc
    finally:
        proc.stop()


def test_engine_flags_change_sizes_and_limits(kt_sim: Proc) -> None:
    url = kt_sim.url
    meta = generate(url, body(prompt(2), [png_url(1920, 1080), png_url(224, 224)])).json()
    assert meta["meta_info"]["sim"]["image_tokens"] == [777, 64]
    server = httpx.get(url + "/server_info").json()
    assert server["mm_process_config"] == {"image": {"max_pixels": 1_254_400}}
    assert server["limit_mm_data_per_request"] == {"image": 3, "video": 1}
    four = generate(url, body(prompt(4), [png_url(28, 28)] * 4))
    assert error_of(four) == "Image count 4 exceeds limit 3 per request."
    # The context check counts the expanded prompt.
    three = generate(url, body(prompt(3), [png_url(1920, 1080)] * 3))
    assert "longer than the model's context length" in error_of(three)


def test_a_text_only_model_ignores_images(tmp_path: Path) -> None:
    doc = yaml.safe_load(DEFAULT_PROFILE.read_text())
    del doc["images"]
    profile = tmp_path / "text-only.yaml"
    profile.write_text(yaml.safe_dump(doc))
    proc = start_sim("--profile", str(profile), name="text-only")
    try:
        assert httpx.get(proc.url + "/model_info").json()["has_image_understanding"] is False
        text = prompt(1)
        meta = generate(proc.url, body(text, [png_url(224, 224)])).json()["meta_info"]
        assert meta["prompt_tokens"] == -(-len(text.encode()) // 4)
        assert meta["sim"]["image_tokens"] == []
    finally:
        proc.stop()
