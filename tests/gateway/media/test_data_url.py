"""Strict data: URL parsing: the header's shape, the type, and base64 without slack."""

from __future__ import annotations

import base64
import random

import pytest

from gateway.media.data_url import DECODE_SLICE, decode_base64, decoded_length, parse_data_url
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


def test_long_payloads_decode_in_slices_exactly() -> None:
    rng = random.Random(5)
    for size in (DECODE_SLICE // 4 * 3 - 1, DECODE_SLICE // 4 * 3, 3 * DECODE_SLICE + 7):
        data = rng.randbytes(size)
        assert _parse_and_decode(f"data:image/png;base64,{base64.b64encode(data).decode()}") == data


def test_padding_at_a_slice_boundary_is_still_refused() -> None:
    # "aGk=" ends the first slice; valid alone, but padding in the middle of the payload.
    payload = "A" * (DECODE_SLICE - 4) + "aGk=" + "AAAA"
    _refused("invalid_base64", f"data:image/png;base64,{payload}")
    bad_char = "A" * (DECODE_SLICE + 100) + "*" + "AAA"
    _refused("invalid_base64", f"data:image/png;base64,{bad_char}")
