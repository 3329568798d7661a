"""API keys on the chat route; health and metrics open unless configured otherwise."""

from __future__ import annotations

import pytest

from gateway.auth import ApiKeyChecker
from gateway.errors import AuthenticationError
from tests.gateway.conftest import chat_body, gateway_client
from tests.gateway.fake_engine import FakeEngine


def test_checker() -> None:
    checker = ApiKeyChecker(["alpha", "beta"])
    checker.check("Bearer beta")
    checker.check("bearer alpha")
    for header in (None, "", "Bearer", "Basic alpha", "Bearer gamma", "Bearer alph"):
        with pytest.raises(AuthenticationError):
            checker.check(header)
    ApiKeyChecker([]).check(None)


async def test_keys_guard_chat_not_health(engine: FakeEngine) -> None:
    async with gateway_client(engine, api_keys=["sekrit"]) as client:
        denied = await client.post("/v1/chat/completions", json=chat_body())
        assert denied.status_code == 401
        assert denied.json()["error"]["type"] == "authentication_error"
        wrong = await client.post(
            "/v1/chat/completions", json=chat_body(), headers={"authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401
        ok = await client.post(
            "/v1/chat/completions", json=chat_body(), headers={"authorization": "Bearer sekrit"}
        )
        assert ok.status_code == 200
        assert (await client.get("/v1/models")).status_code == 401
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200


async def test_protected_health_and_metrics(engine: FakeEngine) -> None:
    auth = {"protect_health": True, "protect_metrics": True}
    async with gateway_client(engine, api_keys=["k"], auth=auth) as client:
        for path in ("/health", "/ready", "/metrics"):
            assert (await client.get(path)).status_code == 401
            assert (
                await client.get(path, headers={"authorization": "Bearer k"})
            ).status_code == 200
