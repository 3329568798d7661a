"""Large base64 strings cut out of a request body before orjson parses it
(gateway.faces.lifted_json): the value and every error are orjson's own, the size picks the
path, and each face serves a large image body through it (and answers bad JSON in its shape)."""

from __future__ import annotations

import base64
import random
from collections.abc import Callable
from typing import Any
from unittest.mock import patch

import orjson
import pybase64
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from gateway.faces import lifted_json
from gateway.settings import MediaSettings
from tests.gateway.conftest import MODEL, gateway_client
from tests.gateway.fake_engine import FakeEngine
from tests.gateway.media.images import encode

MIN = MediaSettings().json_bypass_min_bytes


def b64(size: int, seed: int = 0) -> str:
    return base64.b64encode(random.Random(seed).randbytes(size)).decode("ascii")


def url(size: int = MIN, seed: int = 0) -> str:
    return "data:image/png;base64," + b64(size, seed)


def chat(image: str) -> dict[str, Any]:
    content = [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": "?"}]
    return {"model": MODEL, "messages": [{"role": "user", "content": content}]}


def anthropic(data: str) -> dict[str, Any]:
    source = {"type": "base64", "media_type": "image/png", "data": data}
    return {"messages": [{"role": "user", "content": [{"type": "image", "source": source}]}]}


def same_as_orjson(body: bytes, min_bytes: int = MIN) -> Any:
    """lifted_json.loads(body) with orjson's outcome: the same value, or the same error."""
    error: str | None = None
    try:
        expected = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        error = str(exc)
    if error is not None:
        with pytest.raises(orjson.JSONDecodeError) as raised:
            lifted_json.loads(body, min_bytes)
        assert str(raised.value) == error
        return None
    value = lifted_json.loads(body, min_bytes)
    assert value == expected
    return value


@pytest.mark.parametrize(
    "value",
    [
        chat(url()),
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": url()}]}]},
        anthropic(b64(MIN)),
        {"a": [url(seed=1), url(seed=2)], "b": {"data": b64(MIN, 3)}, "c": "data:x"},
    ],
    ids=["openai", "responses", "anthropic", "several"],
)
def test_large_images_are_cut_out_and_put_back(value: dict[str, Any]) -> None:
    body = orjson.dumps(value)
    assert lifted_json.find_spans(body, MIN)
    assert same_as_orjson(body) == value


def test_json_whitespace_around_a_data_key_is_allowed() -> None:
    body = b'{"data" \n:\t "' + b64(MIN).encode() + b'"}'
    assert lifted_json.find_spans(body, MIN)
    same_as_orjson(body)


def test_the_size_picks_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    searched: list[int] = []
    real = lifted_json.find_spans

    def find_spans(body: bytes | bytearray, min_bytes: int) -> list[tuple[int, int]]:
        searched.append(len(body))
        return real(body, min_bytes)

    monkeypatch.setattr(lifted_json, "find_spans", find_spans)
    small = orjson.dumps(chat(url(1024)))
    assert lifted_json.loads(small, MIN) == orjson.loads(small)
    assert searched == []  # under the bound: orjson alone, no search
    large = orjson.dumps(chat(url()))
    assert lifted_json.loads(large, MIN) == orjson.loads(large)
    assert searched == [len(large)]
    # A string shorter than the bound in a body over it stays in the parse.
    assert lifted_json.find_spans(orjson.dumps([url(1024), "x" * MIN]), MIN) == []


@pytest.mark.parametrize(
    "body",
    [
        # Quoted inside another string (escaped quotes): not a string of its own.
        orjson.dumps({"text": f'see "{url()}" here'}),
        orjson.dumps({"data": f'"{b64(MIN)}"'}),
        # Not base64 all through: a line break (escaped), a space, a bad character.
        orjson.dumps(chat(url()[:-8] + "\nAAAAAAA")),
        orjson.dumps(chat(url()[:-8] + " AAAAAAA")),
        orjson.dumps(chat(url()[:-8] + "*AAAAAAA")),
        orjson.dumps({"data": b64(MIN) + "="}),  # padding in the wrong place
        orjson.dumps({"data": {"nested": b64(MIN)}}),
    ],
    ids=["quoted-url", "quoted-data", "newline", "space", "bad-char", "padding", "not-a-string"],
)
def test_what_is_not_certainly_plain_stays_in_the_parse(body: bytes) -> None:
    assert lifted_json.find_spans(body, MIN) == []
    same_as_orjson(body)


def test_a_data_url_as_a_key_is_parsed_as_before() -> None:
    body = orjson.dumps({url(): 1, "b": [url(seed=1)]})
    assert len(lifted_json.find_spans(body, MIN)) == 2
    assert same_as_orjson(body) == {url(): 1, "b": [url(seed=1)]}


@pytest.mark.parametrize(
    "body",
    [
        orjson.dumps(chat(url()))[:-1],  # truncated
        orjson.dumps(chat(url())) + b"x",  # trailing garbage
        orjson.dumps(chat(url())).replace(b'"?"', b"?"),  # an error after the image
        orjson.dumps(chat(url())).replace(b'"model"', b"model"),  # and one before it
        # A closing quote right before the image text: invalid, and no string of its own.
        b'{"a":"x"' + url().encode() + b'"}',
        b'["x"data":"' + b64(MIN).encode() + b'"]',
        b'{"a":"\xff", "b":"' + url().encode() + b'"}',  # invalid UTF-8 elsewhere
        orjson.dumps(url()),  # not an object: a valid JSON string all the same
    ],
    ids=["truncated", "trailing", "after", "before", "closing-quote", "closing-key", "utf8", "str"],
)
def test_bad_or_odd_json_gets_orjsons_own_outcome(body: bytes) -> None:
    same_as_orjson(body)


def test_the_search_is_bounded_by_the_body_size() -> None:
    # More "data" candidates than the body's size allows before the image: it stays in the
    # parse (slower, still right) rather than the search costing more than the parse.
    noise = [{"data": 1}] * (MIN // 4096 + 40)
    body = orjson.dumps({"noise": noise, "image": url()})
    assert lifted_json.find_spans(body, MIN) == []
    same_as_orjson(body)


def test_strings_that_are_not_most_of_the_body_stay_in_the_parse() -> None:
    # Putting them back walks the rest, which would cost more than orjson's parse of them.
    image = url()  # ~87 KB of data URL: the rest may take 1/33 of the body, ~2.7 KB
    text = "x" * 4096
    after = orjson.dumps({"image": image, "messages": [text]})
    assert lifted_json.find_spans(after, MIN) == []
    same_as_orjson(after)
    # Past what the rest may take: not even searched for.
    assert lifted_json.find_spans(orjson.dumps({"messages": [text], "image": image}), MIN) == []
    # A short prompt with it: cut.
    assert lifted_json.find_spans(orjson.dumps({"messages": [text[:1024]], "image": image}), MIN)


@settings(max_examples=500, deadline=None)
@given(text=st.text("AB+/=*\n", max_size=40), chunk=st.sampled_from([4, 8, 12]))
def test_base64_is_checked_a_chunk_at_a_time_as_a_whole(text: str, chunk: int) -> None:
    raw = text.encode()
    try:
        pybase64.b64decode(raw, validate=True)
        whole = True
    except ValueError:  # binascii.Error is one
        whole = False
    with patch.object(lifted_json, "_CHECK_CHARS", chunk):
        assert lifted_json._is_base64(b"x" + raw + b"y", 1, 1 + len(raw)) is whole


_B64 = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", min_size=1)
_STRINGS = st.one_of(
    st.text(max_size=12),
    _B64.map(lambda s: "data:image/png;base64," + s),
    st.sampled_from(["data", "data:", '"data"', "\\", '"']),
    st.binary(min_size=3, max_size=24).map(lambda b: base64.b64encode(b).decode()),
)
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), _STRINGS),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.one_of(_STRINGS, st.just("data")), inner, max_size=4)
    ),
    max_leaves=12,
)


# Small strings are cut too (min_bytes=1), whatever their share of the body, every candidate
# is looked at, and base64 is checked 8 characters at a time: these exercise the cutting on
# many shapes rather than the bounds.


@settings(max_examples=300, deadline=None)
@given(value=_VALUES, indent=st.booleans())
def test_any_json_parses_as_orjson_parses_it(value: Any, indent: bool) -> None:
    body = orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else 0)
    with (
        patch.object(lifted_json, "_BYTES_PER_CANDIDATE", 1),
        patch.object(lifted_json, "_MIN_SHARE", 0),
        patch.object(lifted_json, "_CHECK_CHARS", 8),
    ):
        same_as_orjson(body, min_bytes=1)


@settings(max_examples=300, deadline=None)
@given(value=_VALUES, cut=st.integers(min_value=0), junk=st.binary(max_size=3))
def test_any_broken_json_fails_as_orjson_fails(value: Any, cut: int, junk: bytes) -> None:
    body = orjson.dumps({"v": value, "data": "QUJD"})
    at = cut % (len(body) + 1)
    with (
        patch.object(lifted_json, "_BYTES_PER_CANDIDATE", 1),
        patch.object(lifted_json, "_MIN_SHARE", 0),
        patch.object(lifted_json, "_CHECK_CHARS", 8),
    ):
        same_as_orjson(body[:at] + junk + body[at:], min_bytes=1)


# -- through each face -------------------------------------------------------------------------


def noise_png() -> str:
    """A PNG whose data URL is over the bound (noise barely compresses)."""
    image = Image.frombytes("RGB", (160, 160), random.Random(7).randbytes(160 * 160 * 3))
    found = "data:image/png;base64," + base64.b64encode(encode(image, "PNG")).decode("ascii")
    assert len(found) > MIN
    return found


def openai_request(image: str) -> dict[str, Any]:
    return {**chat(image), "max_tokens": 8}


def anthropic_request(image: str) -> dict[str, Any]:
    return {**anthropic(image.split(",", 1)[1]), "model": MODEL, "max_tokens": 8}


def responses_request(image: str) -> dict[str, Any]:
    content = [{"type": "input_image", "image_url": image}]
    return {"model": MODEL, "input": [{"role": "user", "content": content}]}


FACES: dict[str, tuple[str, Callable[[str], dict[str, Any]]]] = {
    "openai": ("/v1/chat/completions", openai_request),
    "anthropic": ("/v1/messages", anthropic_request),
    "responses": ("/v1/responses", responses_request),
}


@pytest.mark.parametrize("face", list(FACES))
async def test_each_face_serves_a_large_image_body(
    engine: FakeEngine, face: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, make = FACES[face]
    image = noise_png()
    found: list[list[tuple[int, int]]] = []
    real = lifted_json.find_spans

    def find_spans(body: bytes | bytearray, min_bytes: int) -> list[tuple[int, int]]:
        found.append(real(body, min_bytes))
        return found[-1]

    monkeypatch.setattr(lifted_json, "find_spans", find_spans)
    async with gateway_client(engine) as client:
        response = await client.post(path, content=orjson.dumps(make(image)))
    assert response.status_code == 200, response.text
    assert [len(spans) for spans in found] == [1]  # the image was cut out of the parse
    # The engine gets the client's own data URL, byte for byte (the checked bytes' encoding).
    assert engine.generates[-1]["image_data"] == [image]


@pytest.mark.parametrize("face", list(FACES))
async def test_bad_json_in_a_large_body_is_the_faces_400(engine: FakeEngine, face: str) -> None:
    path, make = FACES[face]
    body = orjson.dumps(make(noise_png()))[:-1]
    with pytest.raises(orjson.JSONDecodeError) as parse:
        orjson.loads(body)
    async with gateway_client(engine) as client:
        response = await client.post(path, content=body)
    assert response.status_code == 400
    error = response.json()
    if face == "anthropic":
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
        assert str(parse.value) in error["error"]["message"]
    else:
        assert error["error"]["code"] == "invalid_json"
        assert str(parse.value) in error["error"]["message"]
    assert engine.generates == []
