"""One auth decision per request (gateway/auth.py, made by gateway/admission.py): the same two
headers on every face endpoint, two different keys refused, and a refused key refused before
it is charged anything (a rate limit, an admission slot, the engine)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.auth import ANONYMOUS, ApiKeyChecker, Caller, authenticate, presented_key
from gateway.errors import AuthenticationError
from gateway.ratelimit import key_id
from tests.gateway.conftest import MODEL, chat_body, gateway_client
from tests.gateway.fake_engine import FakeEngine

KEY, OTHER = "key-one", "key-two"
HELLO = [{"role": "user", "content": "hi"}]
# Every face endpoint, with a body it serves.
ENDPOINTS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": chat_body(),
    "/v1/messages": {"model": MODEL, "max_tokens": 16, "messages": HELLO},
    "/v1/responses": {"model": MODEL, "input": "hi"},
    "/v1/messages/count_tokens": {"model": MODEL, "messages": HELLO},
    "/v1/responses/input_tokens": {"model": MODEL, "input": "hi"},
}
# What every one of them must refuse with a 401, before anything is charged.
REFUSED: dict[str, dict[str, str]] = {
    "nothing": {},
    "wrong bearer": {"authorization": "Bearer nope"},
    "wrong x-api-key": {"x-api-key": "nope"},
    "not bearer": {"authorization": f"Basic {KEY}"},
    "two keys of this gateway": {"authorization": f"Bearer {KEY}", "x-api-key": OTHER},
    "two wrong keys": {"authorization": "Bearer nope", "x-api-key": "nope either"},
}


def error_type(path: str, response: httpx.Response) -> str:
    """The error's type in the face's own shape (Anthropic's envelope, else OpenAI's JSON)."""
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error"
        assert body["request_id"] == response.headers["request-id"]
    kind: str = body["error"]["type"]
    return kind


def test_the_header_rule() -> None:
    assert presented_key("Bearer  k1 ", None) == "k1"
    assert presented_key(None, " k2 ") == "k2"
    assert presented_key("Bearer k1", "k1") == "k1"  # Claude Code sends both, alike
    assert presented_key("", "k2") == "k2"  # an empty header is no header
    for authorization, api_key in (
        (None, None),
        ("", " "),
        ("Bearer", None),
        ("Basic k1", None),
        ("Basic k1", "k1"),  # a malformed Authorization is not skipped over
        ("Bearer k1", "k2"),
    ):
        with pytest.raises(AuthenticationError):
            presented_key(authorization, api_key)
    checker = ApiKeyChecker([KEY, OTHER])
    assert checker.identify(None, OTHER) == Caller(key_id(OTHER))
    assert ApiKeyChecker([]).identify("Bearer anything", "else") is ANONYMOUS


def test_the_decision_is_made_once_and_kept_for_the_request() -> None:
    checker = ApiKeyChecker([KEY])
    scope: dict[str, Any] = {"headers": [(b"x-api-key", KEY.encode())]}
    caller = authenticate(scope, checker)
    assert caller == Caller(key_id(KEY))
    # Whatever the headers say later, the request is who it was found to be.
    scope["headers"] = [(b"authorization", b"Bearer nope")]
    assert authenticate(scope, checker) is caller
    with pytest.raises(AuthenticationError):
        authenticate({"headers": [(b"authorization", b"Bearer nope")]}, checker)


@pytest.mark.parametrize("path", ENDPOINTS)
async def test_every_face_takes_the_key_in_either_header(path: str, engine: FakeEngine) -> None:
    async with gateway_client(engine, api_keys=[KEY, OTHER]) as client:
        for headers in (
            {"authorization": f"Bearer {KEY}"},
            {"x-api-key": OTHER},
            {"authorization": f"Bearer {KEY}", "x-api-key": KEY},
        ):
            response = await client.post(path, json=ENDPOINTS[path], headers=headers)
            assert response.status_code == 200, (headers, response.text)


async def test_an_x_api_key_on_an_openai_face_is_served_not_charged_then_refused(
    engine: FakeEngine,
) -> None:
    """Issue #38: a key in x-api-key on an OpenAI face spent its rate limit at admission and
    was then refused by the route with a 401."""
    limits = {"requests_per_minute": 1}
    async with gateway_client(engine, api_keys=[KEY], rate_limits=limits) as client:
        first = await client.post(
            "/v1/chat/completions", json=chat_body(), headers={"x-api-key": KEY}
        )
        assert first.status_code == 200, first.text
        assert first.headers["x-ratelimit-remaining-requests"] == "0"
        # That request was the minute's one: charged because it was served.
        second = await client.post(
            "/v1/chat/completions", json=chat_body(), headers={"authorization": f"Bearer {KEY}"}
        )
        assert second.status_code == 429


async def test_a_refused_key_costs_nothing_on_any_face(engine: FakeEngine) -> None:
    limits = {"requests_per_minute": 1}
    async with gateway_client(engine, api_keys=[KEY, OTHER], rate_limits=limits) as client:
        for path, body in ENDPOINTS.items():
            for case, headers in REFUSED.items():
                response = await client.post(path, json=body, headers=headers)
                assert response.status_code == 401, (path, case, response.text)
                assert error_type(path, response) == "authentication_error", (path, case)
                assert response.headers["www-authenticate"] == "Bearer"
                assert "x-ratelimit-remaining-requests" not in response.headers, (path, case)
        two_keys = await client.post(
            "/v1/chat/completions", json=chat_body(), headers=REFUSED["two keys of this gateway"]
        )
        assert "different keys" in two_keys.json()["error"]["message"]
        assert not engine.generates
        # Not one of those was counted against either key: each still has its minute's request.
        for key in (KEY, OTHER):
            served = await client.post(
                "/v1/chat/completions", json=chat_body(), headers={"x-api-key": key}
            )
            assert served.status_code == 200, (key, served.text)
        refusals = (await client.get("/metrics")).text
        count = len(ENDPOINTS) * len(REFUSED) + 1
        total = sum(
            float(line.rsplit(" ", 1)[1])
            for line in refusals.splitlines()
            if line.startswith("flashbox_requests_total{") and 'code="401"' in line
        )
        assert total == count


async def test_of_two_different_keys_the_one_of_this_gateway_names_the_caller(
    engine: FakeEngine,
) -> None:
    """Claude Code with ANTHROPIC_API_KEY (a real Anthropic key left in the shell, sent as
    x-api-key) and ANTHROPIC_AUTH_TOKEN (the gateway's key, sent as Bearer): served as the
    gateway's key, on every face."""
    async with gateway_client(engine, api_keys=[KEY]) as client:
        for path, body in ENDPOINTS.items():
            for headers in (
                {"x-api-key": "sk-ant-not-this-gateways", "authorization": f"Bearer {KEY}"},
                {"x-api-key": KEY, "authorization": "Bearer sk-not-this-gateways"},
            ):
                response = await client.post(path, json=body, headers=headers)
                assert response.status_code == 200, (path, response.text)
