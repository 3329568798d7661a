"""The session root of a request with images (gateway.core.images.stable_parts): each image's
per-request sentinel is replaced by the image's digest, so the affinity key follows the image
and not the request's random nonce."""

from __future__ import annotations

from typing import Any

from gateway.core.images import ImageSlots, stable_parts
from gateway.core.request import CoreRequest, Sampling, SessionHints
from gateway.core.retry import request_session_key
from gateway.settings import RoutingSettings
from tests.gateway.media import images

RED = images.data_url(images.png(32, 32))
BLUE = images.data_url(images.png(48, 32))


def _turn(url: str, text: str = "What is this?") -> tuple[list[dict[str, Any]], ImageSlots]:
    """A request's messages as a face leaves them: the image part is its sentinel."""
    slots = ImageSlots()
    content = [slots.add(url, "messages.1.content.0"), {"type": "text", "text": text}]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": content},
    ]
    return messages, slots


def _request(messages: list[dict[str, Any]], slots: ImageSlots) -> CoreRequest:
    return CoreRequest(
        api="openai",
        model="m",
        messages=messages,
        tools=None,
        tool_choice=None,
        template_kwargs={},
        sampling=Sampling(),
        stream=False,
        session=SessionHints(),
        body_bytes=0,
        images=slots,
    )


def test_the_same_image_is_the_same_root_despite_the_nonces() -> None:
    (first, first_slots), (second, second_slots) = _turn(RED), _turn(RED)
    assert first_slots.nonce != second_slots.nonce
    assert first != second  # the sentinels differ
    assert stable_parts(first, first_slots) == stable_parts(second, second_slots)
    routing = RoutingSettings()
    assert request_session_key(_request(first, first_slots), routing) == request_session_key(
        _request(second, second_slots), routing
    )


def test_a_different_image_is_a_different_root() -> None:
    (red, red_slots), (blue, blue_slots) = _turn(RED), _turn(BLUE)
    assert stable_parts(red, red_slots) != stable_parts(blue, blue_slots)
    routing = RoutingSettings()
    assert request_session_key(_request(red, red_slots), routing) != request_session_key(
        _request(blue, blue_slots), routing
    )


def test_no_sentinel_or_payload_is_left_in_the_root() -> None:
    messages, slots = _turn(RED)
    parts = stable_parts(messages, slots)
    text = repr(parts)
    assert slots.nonce not in text
    assert RED.split(",", 1)[1][:32] not in text  # a digest, never the base64
    assert parts[0] == messages[0]  # text-only messages are untouched


def test_given_digests_are_used_instead_of_the_url() -> None:
    """The media stage's digests (of the checked bytes, computed off the loop) decide: two
    different URLs of one image are one root, one URL with different digests two roots."""
    (red, red_slots), (blue, blue_slots) = _turn(RED), _turn(BLUE)
    same = stable_parts(red, red_slots, ["d1"])
    assert same == stable_parts(blue, blue_slots, ["d1"])
    assert same[1]["content"][0] == {"type": "text", "text": "image:d1"}  # type: ignore[index]
    assert stable_parts(red, red_slots, ["d1"]) != stable_parts(red, red_slots, ["d2"])
    assert stable_parts(red, red_slots, ["d1"]) != stable_parts(red, red_slots)
    routing = RoutingSettings()
    assert request_session_key(_request(red, red_slots), routing, ["d1"]) == request_session_key(
        _request(blue, blue_slots), routing, ["d1"]
    )
