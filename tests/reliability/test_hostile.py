"""Hostile input against a real gateway process: never a 5xx, every 4xx says what to fix.

The gateway runs in front of a simulator; after the corpus it must still serve a normal request.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import orjson
import pytest

from tests.reliability.conftest import (
    MODEL,
    assert_healthy,
    assert_openai_error,
    chat_body,
)
from tests.support.procs import Proc

TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def post_raw(gateway: Proc, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json", **headers},
        timeout=60,
    )


def check(response: httpx.Response) -> None:
    """No 5xx ever; a 4xx must be an OpenAI error; a 200 a completion."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        assert_openai_error(response)
    else:
        assert response.json()["object"] == "chat.completion"


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


RAW_BODIES = {
    "invalid utf-8": b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", '
    b'"content": "\xff\xfe\xc0\xaf"}]}',
    "lone surrogate": b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", '
    b'"content": "\\ud800 x \\udfff"}]}',
    "truncated json": b'{"model": "' + MODEL.encode() + b'", "messages": [',
    "empty": b"",
    "null": b"null",
    "array": b"[]",
    "string": b'"hello"',
    "nan": b'{"model": "' + MODEL.encode() + b'", "messages": [], "temperature": NaN}',
    "deep arrays": b"[" * 100_000 + b"]" * 100_000,
    "deep objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "duplicate keys": b'{"model": "x", "model": "' + MODEL.encode() + b'", "messages": '
    b'[{"role": "user", "content": "hi"}], "max_tokens": 4}',
    "nul bytes": b'{"model": "' + MODEL.encode() + b'\\u0000", "messages": []}',
}


@pytest.mark.parametrize("name", sorted(RAW_BODIES))
def test_raw_bodies(gateway: Proc, name: str) -> None:
    check(post_raw(gateway, RAW_BODIES[name]))


def _corpus() -> dict[str, dict[str, Any]]:
    user = {"role": "user", "content": "hi"}
    return {
        "huge string": chat_body("x" * 3_000_000),
        "10k messages": {"model": MODEL, "messages": [user] * 10_000},
        "10k tools": {**chat_body(), "tools": [TOOL] * 10_000},
        "deep tool schema": {
            **chat_body(),
            "tools": [{"type": "function", "function": {"name": "f", "parameters": nested(400)}}],
        },
        "deep content part": {
            **chat_body(),
            "messages": [{"role": "user", "content": [nested(400)]}],
        },
        "deep template kwargs": chat_body(chat_template_kwargs=nested(400)),
        "huge numbers": chat_body(max_tokens=10**40, seed=2**200, top_k=-(10**30)),
        "float extremes": chat_body(temperature=1e308, top_p=-0.0, min_p=5e-324),
        "template in content": chat_body("{{ 7*7 }} {% for x in range(10**9) %}x{% endfor %}"),
        "template in tool name": {
            **chat_body(),
            "tools": [
                {"type": "function", "function": {"name": "{{ cycler.__init__.__globals__ }}"}}
            ],
        },
        "template in role": {"model": MODEL, "messages": [{"role": "{{ 7*7 }}", "content": "x"}]},
        "tool message without call": {
            "model": MODEL,
            "messages": [{"role": "tool", "content": "x", "tool_call_id": "{% raw %}"}],
            "max_tokens": 4,
        },
        "assistant tool call bad args": {
            "model": MODEL,
            "messages": [
                user,
                {
                    "role": "assistant",
                    "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}],
                },
            ],
            "max_tokens": 4,
        },
        "many stops": chat_body(stop=["x"] * 1000),
        "unknown model": {**chat_body(), "model": "../../etc/passwd"},
        "image part": {
            **chat_body(),
            "messages": [{"role": "user", "content": [{"type": "image_url"}]}],
        },
        "n=1000": chat_body(n=1000),
        "tool_choice unknown function": {
            **chat_body(),
            "tools": [TOOL],
            "tool_choice": {"type": "function", "function": {"name": "nope"}},
        },
        "unicode soup": chat_body("\u202e\u0000\ufeff\U0010ffff🙂" * 1000),
    }


CORPUS = _corpus()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus(gateway: Proc, name: str) -> None:
    check(post_raw(gateway, json.dumps(CORPUS[name]).encode()))


def test_deep_nesting_is_refused_with_what_to_fix(gateway: Proc) -> None:
    response = post_raw(gateway, json.dumps(CORPUS["deep tool schema"]).encode())
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "json_too_deep"
    assert "flatten" in error["message"]


WRONG_VALUES: list[Any] = [None, True, -1, 0, 1.5, "x", "", [], {}, [None], {"a": 1}, 10**30]
FIELDS = [
    "model", "messages", "tools", "tool_choice", "stream", "stream_options", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
    "stop", "seed", "presence_penalty", "frequency_penalty", "n", "response_format",
    "reasoning_effort", "chat_template_kwargs", "user",
]  # fmt: skip


@pytest.mark.parametrize("field", FIELDS)
def test_wrong_types_everywhere(gateway: Proc, field: str) -> None:
    for value in WRONG_VALUES:
        body = {**chat_body(), field: value}
        if field == "stream" and value is True:
            continue  # a valid stream; streaming is covered elsewhere
        check(post_raw(gateway, json.dumps(body).encode()))


@pytest.mark.parametrize(
    "key", ["role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"]
)
def test_wrong_types_in_messages(gateway: Proc, key: str) -> None:
    for value in WRONG_VALUES:
        message = {"role": "user", "content": "hi", key: value}
        check(post_raw(gateway, json.dumps({**chat_body(), "messages": [message]}).encode()))
        tool = {"type": "function", "function": {"name": "f", key: value}}
        check(post_raw(gateway, json.dumps({**chat_body(), "tools": [tool]}).encode()))


def raw_request(gateway: Proc, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def status_of(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1]) if raw else 0


def test_header_abuse(gateway: Proc) -> None:
    body = orjson.dumps(chat_body())
    # One huge header, and very many headers: 431 from the gateway or 400 from the HTTP parser.
    huge = httpx.post(
        gateway.url + "/v1/chat/completions", json=chat_body(), headers={"x-big": "a" * 200_000}
    )
    assert huge.status_code in (400, 431)
    if huge.status_code == 431:
        assert_openai_error(huge)
    many = httpx.post(
        gateway.url + "/v1/chat/completions",
        json=chat_body(),
        headers={f"x-h{i}": "v" for i in range(500)},
    )
    assert many.status_code == 431
    assert_openai_error(many)
    # An unsafe request id is replaced, never echoed.
    odd = httpx.post(
        gateway.url + "/v1/chat/completions",
        json=chat_body(),
        headers={"x-request-id": "a b<script>" + "x" * 500},
    )
    assert odd.status_code == 200
    assert "<" not in odd.headers["x-request-id"]
    assert len(odd.headers["x-request-id"]) <= 128
    # Content-Length that lies (too big / not a number), CRLF injection, bad header bytes.
    for request in (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n"
        b"Content-Type: application/json\r\nConnection: close\r\n\r\n" + body,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n"
        b"Connection: close\r\n\r\n" + body,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\r\nInjected: b\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Bad: \xff\xfe\x00\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body,
        b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Length: 5\r\nConnection: close\r\n\r\nzz\r\n",
    ):
        raw = raw_request(gateway, request)
        assert status_of(raw) < 500 or status_of(raw) == 0, raw[:300]
    # Wrong content type, wrong method, unknown paths.
    assert httpx.post(
        gateway.url + "/v1/chat/completions",
        content=body,
        headers={"content-type": "text/plain"},
    ).status_code in (200, 400, 415)
    check_get = httpx.get(gateway.url + "/v1/chat/completions")
    assert check_get.status_code == 405
    assert_openai_error(check_get)
    assert_openai_error(httpx.get(gateway.url + "/../../etc/passwd"))


def test_oversized_body_is_413(gateway: Proc) -> None:
    response = post_raw(gateway, orjson.dumps(chat_body("x" * 5_000_000)))
    assert response.status_code == 413
    assert "limit" in assert_openai_error(response)["message"]  # type: ignore[operator]


def test_healthy_after_the_corpus(gateway: Proc) -> None:
    assert_healthy(gateway)
