"""The engine half of `python -m bench images-device`: image prompts as the gateway builds them,
sent to a running engine's native /generate, with the figures steps a and b need.

The prompt is the gateway's own: the bundled template rendered by the gateway's renderer, the
image part replaced by an `ImageSlots` sentinel and the sentinel by the model's image marker
(gateway/core/run.py render_prompt), and `image_data` a list of data URLs. The text-only twin
of an image prompt is the same text without the `<|image|>` placeholder: the engine expands
that one token into the image's tokens and keeps the begin/end markers as one token each, so
the two prompts' token counts differ by exactly the image's tokens (MEDIA.md 2.3).
"""

from __future__ import annotations

import base64
import io
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from PIL import Image

from gateway.core.images import ImageSlots
from gateway.render import Renderer, RenderSettings, build_renderer
from gateway.routing.health import image_max_pixels
from gateway.settings import ModelSettings

# The token the engine's processor expands per image (sglang-kt 0.7.2 glm5_next.py counts it in
# the prompt against image_data); it sits inside the gateway's image marker.
IMAGE_PLACEHOLDER = "<|image|>"
# sglang-kt 0.7.2's image max_pixels when --mm-process-config does not set one (MEDIA.md 2.2).
ENGINE_DEFAULT_MAX_PIXELS = 6_272_000
# The image the warm-up and the hybrid-rate probe send: small, so its vision time is small.
PROBE_SIZE = (224, 224)
# Bounds on what the script reads back: an answer (server info, tokenize, one event) larger
# than this is not one this script asked for.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
# sglang-kt's load_image opens any string ending in these (any case) as a file (MEDIA.md 3.2).
PATH_SUFFIXES = ("png", "jpg", "jpeg", "webp", "gif")
FILLER_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "again")


class ProbeError(RuntimeError):
    """The engine refused or broke off a request: its own words, for the summary."""


@dataclass(frozen=True)
class EngineInfo:
    """What the engine's /server_info says about images and about itself."""

    max_pixels: int
    # False: --mm-process-config sets no max_pixels, so the engine's default applies.
    max_pixels_reported: bool
    simulator: bool
    # The simulator's tokenizer (fixed-size byte chunks); None for a real engine.
    bytes_per_token: int | None
    # The simulator's time scale (its modelled seconds x this = wall seconds); 1 otherwise.
    time_scale: float


@dataclass(frozen=True)
class Generation:
    """One streamed /generate with max_new_tokens 1."""

    ttft_s: float
    prompt_tokens: int
    cached_tokens: int


def _bounded_json(response: httpx.Response, what: str) -> Any:
    if response.status_code != 200:
        raise ProbeError(f"{what}: HTTP {response.status_code}: {response.text[:500]}")
    if len(response.content) > MAX_ANSWER_BYTES:
        raise ProbeError(f"{what}: answer over {MAX_ANSWER_BYTES} bytes")
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise ProbeError(f"{what}: not JSON ({exc})") from exc


def engine_info(client: httpx.Client, engine: str) -> EngineInfo:
    info = _bounded_json(client.get(engine + "/server_info"), "GET /server_info")
    if not isinstance(info, dict):
        raise ProbeError("GET /server_info: not a JSON object")
    reported = image_max_pixels(info)
    simulator = info.get("simulator") is True
    unit = info.get("bytes_per_token") if simulator else None
    scale = info.get("time_scale") if simulator else None
    return EngineInfo(
        max_pixels=reported or ENGINE_DEFAULT_MAX_PIXELS,
        max_pixels_reported=reported is not None,
        simulator=simulator,
        bytes_per_token=unit if isinstance(unit, int) and unit > 0 else None,
        time_scale=float(scale) if isinstance(scale, int | float) and scale > 0 else 1.0,
    )


def solid_png(width: int, height: int, colour: tuple[int, int, int], unique: bool = False) -> str:
    """A data URL of a solid-colour PNG. `unique`: one corner pixel gets a random colour, so no
    two requests (in this run or an earlier one) send the same pixels: the engine caches vision
    embeddings by pixel hash (SGLANG_VLM_CACHE_SIZE_MB) and would skip the tower for a repeat."""
    image = Image.new("RGB", (width, height), colour)
    if unique:
        red, green, blue = secrets.token_bytes(3)
        image.putpixel((0, 0), (red, green, blue))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    data = buffer.getvalue()
    url = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    if url[-4:].lower().endswith(PATH_SUFFIXES):
        # As the gateway does (gateway/media/check.py): one byte after the PNG's end, which
        # decoders ignore, so the base64 ends in "==" and the engine does not open it as a path.
        url = "data:image/png;base64," + base64.b64encode(data + b"\0").decode("ascii")
    return url


class PromptBuilder:
    """Image prompts as the gateway renders them, one image after a user question."""

    def __init__(self, info: EngineInfo) -> None:
        self._renderer: Renderer = build_renderer(RenderSettings())
        self._marker = ModelSettings().image_marker
        if IMAGE_PLACEHOLDER not in self._marker:
            raise ProbeError(
                f"the model's image marker {self._marker!r} has no {IMAGE_PLACEHOLDER}"
            )
        self._unit = info.bytes_per_token

    def image_prompt(self, question: str) -> str:
        """The prompt of a user turn [question, image], the marker where the gateway puts it."""
        for pad in range(self._unit or 1):
            prompt = self._render(question + " " * pad)
            before = prompt.split(IMAGE_PLACEHOLDER, 1)[0].encode()
            # The simulator starts an image's tokens on one of its byte-chunk boundaries,
            # padding the text before it; aligned text keeps that padding out of the image's
            # count. A real tokenizer needs no alignment (the first render is used).
            if self._unit is None or len(before) % self._unit == 0:
                return prompt
        raise ProbeError("no padding of the question aligns the image marker")  # unreachable

    def _render(self, question: str) -> str:
        slots = ImageSlots()
        part = slots.add("data:,", "messages.0.content.1")
        messages = [{"role": "user", "content": [{"type": "text", "text": question}, part]}]
        prompt = self._renderer.render(messages, None, {})
        placed, order = slots.place(prompt, self._marker)
        if order != [0]:
            raise ProbeError("the template did not show the image once")
        return placed

    def without_image(self, prompt: str) -> str:
        """The same text with the image's placeholder taken out (begin/end markers kept)."""
        return prompt.replace(IMAGE_PLACEHOLDER, "", 1)


def question(filler_words: int = 0) -> str:
    """A question that starts with a nonce: no two measured requests share a cached prefix.
    The nonce has a fixed length, so repeats' prompts are the same length."""
    words = " ".join(FILLER_WORDS[i % len(FILLER_WORDS)] for i in range(filler_words))
    head = f"[{secrets.token_hex(4)}] "
    body = f"Here is some text: {words}. " if words else ""
    return head + body + "What does the image show? One word."


def count_tokens(client: httpx.Client, engine: str, text: str) -> int:
    """The engine's token count of `text` as a /generate prompt (as the gateway asks it:
    gateway/upstream/client.py count_prompt_tokens)."""
    body = {"prompt": text, "add_special_tokens": True}
    answer = _bounded_json(client.post(engine + "/tokenize", json=body), "POST /tokenize")
    if isinstance(answer, dict):
        count = answer.get("count")
        if isinstance(count, int):
            return count
        if isinstance(answer.get("tokens"), list):
            return len(answer["tokens"])
    raise ProbeError("POST /tokenize: no count or tokens in the answer")


def generate(
    client: httpx.Client, engine: str, text: str, images: Sequence[str] = ()
) -> Generation:
    """Stream one /generate of one new token; TTFT is the first event's arrival."""
    body: dict[str, Any] = {
        "text": text,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "stream": True,
    }
    if images:
        body["image_data"] = list(images)
    started = time.perf_counter()
    ttft: float | None = None
    meta: dict[str, Any] = {}
    with client.stream("POST", engine + "/generate", json=body) as response:
        if response.status_code != 200:
            response.read()
            raise ProbeError(f"POST /generate: HTTP {response.status_code}: {response.text[:500]}")
        for line in response.iter_lines():
            if len(line) > MAX_ANSWER_BYTES:
                raise ProbeError(f"POST /generate: an event over {MAX_ANSWER_BYTES} bytes")
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            event = orjson.loads(data)
            if not isinstance(event, dict):
                continue
            if "error" in event:
                raise ProbeError(f"POST /generate: {event['error']}")
            if ttft is None:
                ttft = time.perf_counter() - started
            if isinstance(event.get("meta_info"), dict):
                meta = event["meta_info"]
    prompt_tokens = meta.get("prompt_tokens")
    if ttft is None or not isinstance(prompt_tokens, int):
        raise ProbeError("POST /generate: the stream ended without a token or prompt_tokens")
    cached = meta.get("cached_tokens")
    return Generation(ttft, prompt_tokens, cached if isinstance(cached, int) else 0)
