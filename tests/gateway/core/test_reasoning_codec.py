"""Reasoning tokens (gateway/core/reasoning_codec.py): the exact text comes back from a token of
ours, and anything else (foreign, altered, expired, oversized, garbage) is None, never an error."""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import zlib

import pytest

from gateway.core.reasoning_codec import PREFIX, ReasoningCodec

KEY = b"k" * 32
NOW = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def codec(
    key: bytes = KEY, *, clock: Clock | None = None, max_text_bytes: int = 1 << 20
) -> ReasoningCodec:
    return ReasoningCodec(
        key, max_age_s=3600.0, max_text_bytes=max_text_bytes, clock=clock or Clock()
    )


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(payload: bytes, key: bytes = KEY) -> str:
    """A token for arbitrary payload bytes, correctly signed: exercises what follows the MAC."""
    signed = PREFIX + b64(payload)
    mac = hmac.new(key, signed.encode(), hashlib.sha256).digest()[:16]
    return signed + "." + b64(mac)


def stamp(seconds: float = NOW) -> bytes:
    return int(seconds).to_bytes(8, "big")


@pytest.mark.parametrize(
    "text",
    [
        "plain reasoning",
        "",
        "unicode: é 東京 🎉 \u0000 \u2028 \ud7ff",
        "quotes \" ' \\ and newlines\n\r\n\tand </think> markup <tool_call>",
        " leading and trailing whitespace \n\n",
    ],
    ids=["plain", "empty", "unicode", "markup", "whitespace"],
)
def test_round_trip_is_exact(text: str) -> None:
    c = codec()
    token = c.encode(text)
    assert token.startswith(PREFIX)
    assert token.isascii()
    assert " " not in token
    assert c.decode(token) == text


def test_round_trip_of_a_large_text() -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "é", "東京", "\n", "🎉", "x" * 40]
    text = " ".join(rng.choice(words) for _ in range(200_000))
    assert len(text.encode()) > 1_000_000
    c = codec(max_text_bytes=4 << 20)
    token = c.encode(text)
    assert len(token) < len(text.encode())  # compressed
    assert c.decode(token) == text


def test_another_process_with_the_same_key_restores_it() -> None:
    assert codec().decode(codec().encode("shared")) == "shared"


def test_a_foreign_key_is_not_ours() -> None:
    assert codec(b"other-key").decode(codec().encode("text")) is None


def test_random_keys_differ_per_process() -> None:
    one = ReasoningCodec.with_random_key(max_age_s=60, max_text_bytes=1000)
    two = ReasoningCodec.with_random_key(max_age_s=60, max_text_bytes=1000)
    token = one.encode("text")
    assert one.decode(token) == "text"
    assert two.decode(token) is None


def test_any_tampering_is_detected() -> None:
    c = codec()
    token = c.encode("the reasoning the model wrote")
    signed, _, mac = token.rpartition(".")
    payload = signed.removeprefix(PREFIX)
    for position in range(len(payload)):
        flipped = "A" if payload[position] != "A" else "B"
        altered = PREFIX + payload[:position] + flipped + payload[position + 1 :] + "." + mac
        assert c.decode(altered) is None, position
    for position in range(len(mac)):
        flipped = "A" if mac[position] != "A" else "B"
        assert c.decode(signed + "." + mac[:position] + flipped + mac[position + 1 :]) is None
    assert c.decode(signed + "." + mac[:-2]) is None
    assert c.decode(token + "AA") is None
    assert c.decode(signed) is None


def test_a_different_text_under_the_old_mac_is_rejected() -> None:
    c = codec()
    _, _, mac = c.encode("original").rpartition(".")
    swapped = c.encode("edited").rpartition(".")[0] + "." + mac
    assert c.decode(swapped) is None


def test_expired_tokens_fall_back() -> None:
    clock = Clock()
    c = codec(clock=clock)
    token = c.encode("old")
    clock.now = NOW + 3600
    assert c.decode(token) == "old"
    clock.now = NOW + 3601
    assert c.decode(token) is None


@pytest.mark.parametrize(
    "token",
    [
        None,
        42,
        b"fbx1.abc.def",
        "",
        "fbx1",
        "fbx1.",
        "fbx1..",
        "fbx1.abc",
        "fbx1.abc.",
        "fbx1.!!!.###",
        "fbx1.é.é",
        "fbx2.abc.def",
        "EqQKCAgCEAEYAiJA" + "x" * 200,  # a signature from another server
        "recorder-signature-0001",
    ],
)
def test_garbage_is_none(token: object) -> None:
    assert codec().decode(token) is None


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x00" * 7,
        stamp() + b"not zlib at all",
        stamp() + zlib.compress(b"\xff\xfe invalid utf-8"),
        stamp() + zlib.compress(b"cut short")[:-3],
        stamp(NOW - 10_000) + zlib.compress(b"expired"),
    ],
    ids=["empty", "short", "not-zlib", "not-utf8", "truncated", "expired"],
)
def test_signed_but_malformed_payloads_are_none(payload: bytes) -> None:
    assert codec().decode(forge(payload)) is None


def test_a_well_formed_forged_payload_decodes() -> None:
    # The check above is meaningful: the same construction with a good payload decodes.
    assert codec().decode(forge(stamp() + zlib.compress("fine é".encode()))) == "fine é"


def test_the_size_bound() -> None:
    bounded = codec(max_text_bytes=1000)
    assert bounded.decode(bounded.encode("x" * 1000)) == "x" * 1000
    assert bounded.decode(bounded.encode("x" * 1001)) is None
    assert bounded.decode(bounded.encode("é" * 500)) == "é" * 500  # bytes, not characters
    assert bounded.decode(bounded.encode("é" * 501)) is None


def test_a_compression_bomb_is_refused_without_inflating_it() -> None:
    bomb = stamp() + zlib.compress(b"\0" * (32 << 20), 9)  # 32 MiB in ~32 KiB
    assert len(bomb) < 64 << 10
    assert codec(max_text_bytes=1 << 20).decode(forge(bomb)) is None


def test_an_empty_key_is_refused() -> None:
    with pytest.raises(ValueError, match="signing key"):
        ReasoningCodec(b"", max_age_s=1, max_text_bytes=1)
