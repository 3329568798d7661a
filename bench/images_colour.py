"""Step c of `python -m bench images-device`: reordered tool results, one coloured image each.

An assistant turn calls a tool twice (call_a, call_b); the results come back in the other
order, each a text part and a solid-colour PNG. The model's template puts results into call
order, so the prompt shows call_a's image first; an `image_data` built in message order (what
SGLang's own chat server does, MEDIA.md 3.4) pairs each image with the other result's text.
The model is asked for call_a's colour; the case passes when the answer names it and not the
other colour. Run twice, colours swapped, so a constant answer cannot pass.

With `judge=False` (the simulator sees no colours) the requests still go through the gateway
and must be answered with both images' tokens counted; the answer is not judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx

from bench.images_engine import solid_png
from gateway.media.tokens import prompt_tokens

COLOURS: dict[str, tuple[int, int, int]] = {"red": (220, 20, 20), "blue": (20, 40, 220)}
IMAGE_SIZE = (224, 224)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "take_photo",
            "description": "Take a photo with one of the cameras.",
            "parameters": {
                "type": "object",
                "properties": {"camera": {"type": "string"}},
                "required": ["camera"],
            },
        },
    }
]


@dataclass
class ColourCase:
    call_a: str  # the colour of call_a's image (the one asked about)
    call_b: str
    status: int | None = None
    answer: str | None = None
    prompt_tokens: int | None = None
    # "pass", "fail" or "not judged"; None until answered.
    verdict: str | None = None
    error: str | None = None


def colour_messages(call_a: str, call_b: str) -> list[dict[str, Any]]:
    width, height = IMAGE_SIZE

    def result(call: str, camera: str, colour: str) -> dict[str, Any]:
        url = solid_png(width, height, COLOURS[colour])
        return {
            "role": "tool",
            "tool_call_id": call,
            "content": [
                {"type": "text", "text": f"Photo from camera {camera}:"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }

    def call(call_id: str, camera: str) -> dict[str, Any]:
        arguments = '{"camera": "' + camera + '"}'
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": "take_photo", "arguments": arguments},
        }

    return [
        {"role": "user", "content": "Take one photo with camera a and one with camera b."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("call_a", "a"), call("call_b", "b")],
        },
        # Out of call order on purpose: call_b's result first.
        result("call_b", "b", call_b),
        result("call_a", "a", call_a),
        {
            "role": "user",
            "content": "What colour is the photo from camera a (call_a)? Answer with one word.",
        },
    ]


def _says(text: str, word: str) -> bool:
    return re.search(rf"\b{word}\b", text, re.IGNORECASE) is not None


def first_model(client: httpx.Client, base: str, headers: dict[str, str]) -> str:
    response = client.get(base + "/v1/models", headers=headers)
    response.raise_for_status()
    return str(response.json()["data"][0]["id"])


def ask(
    client: httpx.Client,
    url: str,
    headers: dict[str, str],
    model: str,
    case: ColourCase,
    *,
    judge: bool,
    max_tokens: int,
    max_pixels: int,
) -> ColourCase:
    body = {
        "model": model,
        "messages": colour_messages(case.call_a, case.call_b),
        "tools": TOOLS,
        "max_tokens": max_tokens,
        "temperature": 0,
        # A short reasoning block: the question needs no more.
        "reasoning_effort": "low",
    }
    try:
        response = client.post(url, json=body, headers=headers)
    except httpx.HTTPError as exc:
        case.error = f"{type(exc).__name__}: {exc}"
        return case
    case.status = response.status_code
    if response.status_code != 200:
        case.error = response.text[:500]
        return case
    answer = response.json()
    message = answer["choices"][0]["message"]
    case.answer = message.get("content") or ""
    usage = answer.get("usage") or {}
    case.prompt_tokens = usage.get("prompt_tokens")
    width, height = IMAGE_SIZE
    # Both images reached the engine: their tokens are in its prompt count.
    least = 2 * prompt_tokens(width, height, max_pixels=max_pixels)
    if not isinstance(case.prompt_tokens, int) or case.prompt_tokens < least:
        case.error = f"prompt_tokens {case.prompt_tokens}: fewer than two images' {least}"
        return case
    if not judge:
        case.verdict = "not judged"
    elif _says(case.answer, case.call_a) and not _says(case.answer, case.call_b):
        case.verdict = "pass"
    else:
        case.verdict = "fail"
    return case


def cases() -> list[ColourCase]:
    return [ColourCase(call_a="red", call_b="blue"), ColourCase(call_a="blue", call_b="red")]
