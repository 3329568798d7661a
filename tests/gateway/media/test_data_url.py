"""Strict data: URL parsing: the header's shape, the type, and base64 without slack."""

from __future__ import annotations

import base64
import binascii
import random

import pytest

from gateway.media.data_url import decode_base64, decoded_length, parse_data_url
from gateway.media.errors import MediaError

WHERE = "messages.1.content.0"


def _refused(reason: str, url: str) -> MediaError:
    with pytest.raises(MediaError) as caught:
        _parse_and_decode(url)
    assert caught.value.reason == reason
    assert caught.value.code == reason
    assert caught.value.param == WHERE
    assert caught.value.status_code == 400
    assert caught.value.message.startswith(f"{WHERE}: ")
    return caught.value


def _parse_and_decode(url: str) -> bytes:
    parsed = parse_data_url(url, WHERE)
    decoded_length(parsed, WHERE)
    return decode_base64(parsed, WHERE)


def test_parses_an_image_data_url() -> None:
    parsed = parse_data_url("data:image/png;base64,aGVsbG8=", WHERE)
    assert parsed.media_type == "image/png"
    assert parsed.url[parsed.start :] == "aGVsbG8="
    assert decoded_length(parsed, WHERE) == 5
    assert decode_base64(parsed, WHERE) == b"hello"


def test_type_and_encoding_names_are_case_insensitive() -> None:
    parsed = parse_data_url("DATA:Image/JPEG;BASE64,aGk=", WHERE)
    assert parsed.media_type == "image/jpeg"


BAD_BASE64 = ["", "aGk", "aGVsbG8==", "aGVs bG8=", "aGVs\nbG8=", "aGVsbG8_", "aGVsbG8-",
              "=aGVsbG8", "aGk=aGk=", "é==="]  # fmt: skip


@pytest.mark.parametrize("payload", BAD_BASE64)
def test_bad_base64_is_refused(payload: str) -> None:
    error = _refused("invalid_base64", f"data:image/png;base64,{payload}")
    assert "base64" in error.message


@pytest.mark.parametrize(
    "url",
    [
        "data:text/plain;base64,aGk=",
        "data:application/octet-stream;base64,aGk=",
        "data:;base64,aGk=",
        "data:video/mp4;base64,aGk=",
    ],
)
def test_non_image_types_are_refused(url: str) -> None:
    error = _refused("unsupported_image_type", url)
    assert "image/*" in error.message


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png,rawbytes",  # not base64
        "data:image/png;charset=utf-8;base64,aGk=",  # parameters
        "data:image/png;base64",  # no comma
        "data:image;base64,aGk=",  # no subtype
        "data: image/png;base64,aGk=",
    ],
)
def test_malformed_data_urls_are_refused(url: str) -> None:
    _refused("malformed_data_url", url)


def _length(payload: str) -> int:
    return decoded_length(parse_data_url(f"data:image/png;base64,{payload}", WHERE), WHERE)


def test_length_is_known_before_decoding() -> None:
    assert _length("A" * 4000) == 3000
    assert _length("A" * 3996 + "AA==") == 2998
    assert _length("A" * 3996 + "AAA=") == 2999


# A size past which fast decoders change strategy (SIMD blocks, worker-thread hand-off).
LONG = 64 * 1024


def test_long_payloads_decode_exactly() -> None:
    rng = random.Random(5)
    for size in (LONG // 4 * 3 - 1, LONG // 4 * 3, 3 * LONG + 7):
        data = rng.randbytes(size)
        assert _parse_and_decode(f"data:image/png;base64,{base64.b64encode(data).decode()}") == data


def test_padding_or_a_bad_character_deep_in_a_long_payload_is_refused() -> None:
    # "aGk=" is valid alone, but padding in the middle of the payload.
    payload = "A" * (LONG - 4) + "aGk=" + "AAAA"
    _refused("invalid_base64", f"data:image/png;base64,{payload}")
    bad_char = "A" * (LONG + 100) + "*" + "AAA"
    _refused("invalid_base64", f"data:image/png;base64,{bad_char}")


def test_decoding_refuses_exactly_what_binascii_strict_mode_refuses() -> None:
    """The decoder (pybase64, validate=True) against the standard library's strict mode, on
    payloads of whole 4-character groups drawn from the alphabet, padding and near misses."""
    rng = random.Random(64)
    characters = "AQgw/+9z==-_ .\n\x00é*"
    for _ in range(20_000):
        payload = "".join(rng.choice(characters) for _ in range(4 * rng.randint(1, 3)))
        try:
            expected: bytes | None = binascii.a2b_base64(payload, strict_mode=True)
        except (binascii.Error, ValueError):
            expected = None
        try:
            got: bytes | None = _parse_and_decode(f"data:image/png;base64,{payload}")
            reason = None
        except MediaError as error:
            got, reason = None, error.reason
        assert got == expected, payload
        assert reason == (None if expected is not None else "invalid_base64")
