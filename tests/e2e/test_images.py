"""Images end to end: every face takes them, the engine gets checked data URLs in prompt order,
and usage counts the image tokens. Real gateway + simulator processes, official SDKs."""

from __future__ import annotations

import base64
import io
import random
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion
from PIL import Image

from tests.e2e.conftest import client_for, metric_sum
from tests.support.procs import Proc, start_gateway, start_sim

MODEL = "glm-5.3-flash"


def png(width: int, height: int, colour: tuple[int, int, int] = (200, 30, 30)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def tokens_of(width: int, height: int) -> int:
    """The engine's image tokens (MEDIA.md 2.3), within its default max_pixels."""
    h, w = round(height / 28) * 28, round(width / 28) * 28
    return h * w // 784


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    proc = start_sim("--tool-calls", "0")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def gateway(sim: Proc) -> Iterator[Proc]:
    env = {"FLASHBOX_API_KEYS": "", "FLASHBOX_HEALTH__INTERVAL_S": "0.2"}
    proc = start_gateway([sim.url], env=env)
    try:
        yield proc
    finally:
        proc.stop()


def _text_tokens(gateway: Proc, text: str) -> int:
    with client_for(gateway) as client:
        done = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=8
        )
    assert done.usage is not None
    return done.usage.prompt_tokens


def test_the_model_cards_image_url_request_is_answered(gateway: Proc) -> None:
    image = png(224, 224)
    with client_for(gateway) as client:
        done = client.chat.completions.create(
            model=MODEL,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": image, "detail": "high"}},
                        {"type": "text", "text": "What is in this image?"},
                    ],
                }
            ],
            max_tokens=200,
        )
    assert done.choices[0].message.content
    assert done.usage is not None
    # The image's tokens are in the prompt: more than the same request without it.
    without = _text_tokens(gateway, "What is in this image?")
    assert done.usage.prompt_tokens - without >= tokens_of(224, 224)


def _prompt_tokens(gateway: Proc, messages: Any, **extra: Any) -> int:
    with client_for(gateway) as client:
        done: ChatCompletion = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=8, **extra
        )
    # An answer came back (at 8 tokens it may still be reasoning).
    message = done.choices[0].message
    assert message.content or getattr(message, "reasoning_content", None)
    assert done.usage is not None
    return done.usage.prompt_tokens


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def test_an_image_in_a_system_message(gateway: Proc) -> None:
    # The SDK's types allow only text parts in a system message; the gateway takes images too.
    def messages(*image: dict[str, Any]) -> Any:
        system = [{"type": "text", "text": "The reference image:"}, *image]
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": "What colour is the reference image?"},
        ]

    with_image = _prompt_tokens(gateway, messages(_image_part(png(256, 256))))
    assert with_image - _prompt_tokens(gateway, messages()) >= tokens_of(256, 256)


def test_an_image_in_a_tool_message(gateway: Proc) -> None:
    tools: Any = [{"type": "function", "function": {"name": "screenshot", "parameters": {}}}]

    def messages(*image: dict[str, Any]) -> Any:
        call = {"id": "call_1", "type": "function",
                "function": {"name": "screenshot", "arguments": "{}"}}  # fmt: skip
        result = [{"type": "text", "text": "Here is the screen."}, *image]
        return [
            {"role": "user", "content": "Take a screenshot and describe it."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ]

    image = _image_part(png(320, 196, (20, 20, 200)))
    with_image = _prompt_tokens(gateway, messages(image), tools=tools)
    assert with_image - _prompt_tokens(gateway, messages(), tools=tools) >= tokens_of(320, 196)


def test_anthropic_image_blocks_in_user_and_tool_results(gateway: Proc) -> None:
    first, second = png(64, 64), png(512, 512, (20, 200, 20))
    client = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0)
    message = client.messages.create(
        model=MODEL,
        max_tokens=16,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": first.split(",", 1)[1],
                        },
                    },
                    {"type": "text", "text": "Look at this."},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": second.split(",", 1)[1],
                                },
                            }
                        ],
                    }
                ],
            },
        ],
        tools=[{"name": "shot", "input_schema": {"type": "object"}}],
    )
    usage = message.usage
    prompt = (
        usage.input_tokens
        + (usage.cache_read_input_tokens or 0)
        + (usage.cache_creation_input_tokens or 0)
    )
    assert prompt > tokens_of(64, 64) + tokens_of(512, 512)


def test_responses_input_image(gateway: Proc) -> None:
    with client_for(gateway) as client:
        response = client.responses.create(
            model=MODEL,
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Describe it."},
                        {"type": "input_image", "image_url": png(320, 240), "detail": "auto"},
                    ],
                }
            ],
        )
    assert response.status == "completed"
    assert response.usage is not None
    assert response.usage.input_tokens > tokens_of(320, 240)


def noise_png(width: int, height: int) -> str:
    """A PNG that barely compresses: its data URL is far over media.json_bypass_min_bytes, so
    the gateway cuts it out of the request's parse (gateway/faces/lifted_json.py), and the
    /generate body is megabytes."""
    image = Image.frombytes("RGB", (width, height), random.Random(3).randbytes(width * height * 3))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize("face", ["openai", "anthropic"])
def test_a_large_image_reaches_the_engine_intact(gateway: Proc, face: str) -> None:
    image = noise_png(640, 480)
    assert len(image) > 1_000_000
    if face == "openai":
        content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": image}}]
        path = "/v1/chat/completions"
    else:
        source = {"type": "base64", "media_type": "image/png", "data": image.split(",", 1)[1]}
        content = [{"type": "image", "source": source}]
        path = "/v1/messages"
    content.append({"type": "text", "text": "What is in this image?"})
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 8}
    response = httpx.post(gateway.url + path, json=body, timeout=60)
    assert response.status_code == 200, response.text
    # The engine decoded the image (the simulator does, as SGLang's processor does) and
    # counted its tokens.
    usage = response.json()["usage"]
    prompt = usage.get("prompt_tokens") or (
        usage["input_tokens"]
        + (usage.get("cache_read_input_tokens") or 0)
        + (usage.get("cache_creation_input_tokens") or 0)
    )
    assert prompt > tokens_of(640, 480)


@pytest.mark.parametrize(
    ("part", "says"),
    [
        ({"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}, "video_url"),
        ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "input_audio"),
        ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, "file"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!"}}, "base64"),
        ({"type": "mystery"}, "mystery"),
    ],
    ids=["video", "audio", "file-url", "bad-base64", "unknown-part"],
)
def test_what_cannot_be_served_is_a_400_naming_it(
    gateway: Proc, part: dict[str, object], says: str
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": [part]}], "max_tokens": 4}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert says in error["message"].lower() or says in str(error.get("param")).lower()


def test_typed_image_markers_are_refused(gateway: Proc) -> None:
    with client_for(gateway) as client, pytest.raises(openai.BadRequestError, match="marker"):
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi <|begin_of_image|><|image|>"}],
            max_tokens=4,
        )


def test_media_metrics_count_images_and_rejections(gateway: Proc) -> None:
    before = metric_sum(gateway, "flashbox_media_images_total", {"source": "data"})
    with client_for(gateway) as client:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": [{"type": "image", "url": png(32, 32)}]}],  # type: ignore[misc, list-item]
            max_tokens=4,
        )
    assert metric_sum(gateway, "flashbox_media_images_total", {"source": "data"}) == before + 1
    rejected = metric_sum(gateway, "flashbox_media_rejected_total")
    bad = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    body = {"model": MODEL, "messages": [{"role": "user", "content": [bad]}], "max_tokens": 4}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 400
    assert metric_sum(gateway, "flashbox_media_rejected_total") == rejected + 1


@pytest.fixture(scope="module")
def kt_gateway() -> Iterator[Proc]:
    """A simulator launched with KT's image bound (800 tokens an image) and its gateway."""
    sim = start_sim(
        "--tool-calls", "0", "--mm-process-config", '{"image": {"max_pixels": 1254400}}'
    )
    try:
        env = {"FLASHBOX_API_KEYS": "", "FLASHBOX_HEALTH__INTERVAL_S": "0.2"}
        gateway = start_gateway([sim.url], env=env)
        try:
            yield gateway
        finally:
            gateway.stop()
    finally:
        sim.stop()


def test_the_gateway_counts_image_tokens_with_the_engines_own_bound(kt_gateway: Proc) -> None:
    """The gateway reads the engine's max_pixels from /server_info: count_tokens for a 1080p
    image follows the engine's 777 tokens (KT's bound), not the default's 2,691."""
    image = png(1920, 1080)
    source = {"type": "base64", "media_type": "image/png", "data": image.split(",", 1)[1]}
    content: Any = [{"type": "image", "source": source}, {"type": "text", "text": "?"}]
    messages: Any = [{"role": "user", "content": content}]
    client = anthropic.Anthropic(base_url=kt_gateway.url, api_key="unused", max_retries=0)
    counted = client.messages.count_tokens(model=MODEL, messages=messages).input_tokens
    served = client.messages.create(model=MODEL, max_tokens=8, messages=messages).usage
    engine = (
        served.input_tokens
        + (served.cache_read_input_tokens or 0)
        + (served.cache_creation_input_tokens or 0)
    )
    # The simulator's tokenizer counts the markers' text in 4-byte pieces, where the engine's
    # counts each marker as one token: a few tokens apart, never the 1,914 the bound makes.
    assert abs(counted - engine) <= 8
    assert engine < 777 + 200
