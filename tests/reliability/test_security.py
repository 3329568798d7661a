"""API keys, secrets and prompts kept out of logs, CORS off by default."""

from __future__ import annotations

import logging

import httpx
import pytest

from gateway.observability.logging import REDACTED, RedactingFilter
from tests.gateway.conftest import chat_body as fake_chat_body
from tests.gateway.conftest import gateway_client
from tests.gateway.fake_engine import FakeEngine
from tests.reliability.conftest import assert_openai_error, chat_body, gateway_env
from tests.support.procs import Proc, start_gateway

KEYS = ("sk-first-0123456789abcdef", "sk-second-fedcba9876543210")
PROMPT = "my-private-prompt-4242"


def test_several_keys_and_nothing_secret_in_the_logs(sim: Proc) -> None:
    gateway = start_gateway(
        [sim.url],
        env=gateway_env(
            FLASHBOX_API_KEYS=",".join(KEYS),
            FLASHBOX_OBSERVABILITY__ACCESS_LOG="true",
            FLASHBOX_OBSERVABILITY__LOG_LEVEL="debug",
        ),
    )
    url = gateway.url + "/v1/chat/completions"
    try:
        for key in KEYS:
            ok = httpx.post(
                url, json=chat_body(PROMPT), headers={"authorization": f"Bearer {key}"}, timeout=30
            )
            assert ok.status_code == 200, ok.text
        for header in (
            {},
            {"authorization": f"Bearer {KEYS[0][:-1]}"},
            {"authorization": f"Bearer {KEYS[0]}x"},
            {"authorization": KEYS[0]},
            {"authorization": f"Basic {KEYS[0]}"},
        ):
            refused = httpx.post(url, json=chat_body(PROMPT), headers=header, timeout=30)
            assert refused.status_code == 401
            assert assert_openai_error(refused)["type"] == "authentication_error"
        # A request that fails inside the gateway logs a traceback: still no prompt, no key.
        httpx.post(
            url,
            json={
                **chat_body(PROMPT),
                "tools": [{"type": "function", "function": {"name": PROMPT}}],
            },
            headers={"authorization": f"Bearer {KEYS[1]}"},
            timeout=30,
        )
    finally:
        gateway.stop()
    log = gateway.log()
    assert "POST /v1/chat/completions" in log  # the access log was on
    for secret in (*KEYS, PROMPT):
        assert secret not in log


def test_redacting_filter() -> None:
    redactor = RedactingFilter(list(KEYS), max_chars=200)
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "headers %s then %s", ({"Authorization": "Bearer abc.def"},
        f"key={KEYS[0]}"), None,
    )  # fmt: skip
    assert redactor.filter(record)
    text = record.getMessage()
    assert "abc.def" not in text
    assert KEYS[0] not in text
    assert text.count(REDACTED) == 2
    try:
        raise ValueError(f"x-api-key: {KEYS[1]} " + "p" * 1000)
    except ValueError:
        import sys

        failing = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom", None, sys.exc_info())
    redactor.filter(failing)
    assert failing.exc_text is not None
    assert KEYS[1] not in failing.exc_text
    assert "chars cut" in failing.exc_text


@pytest.mark.parametrize(("origins", "allowed"), [([], False), (["https://app.example"], True)])
async def test_cors_off_by_default(origins: list[str], allowed: bool) -> None:
    async with gateway_client(FakeEngine(), security={"cors_allow_origins": origins}) as client:
        preflight = await client.options(
            "/v1/chat/completions",
            headers={
                "origin": "https://app.example",
                "access-control-request-method": "POST",
            },
        )
        response = await client.post(
            "/v1/chat/completions", json=fake_chat_body(), headers={"origin": "https://app.example"}
        )
    assert response.status_code == 200
    got = response.headers.get("access-control-allow-origin")
    assert (got == "https://app.example") is allowed
    assert ("access-control-allow-origin" in preflight.headers) is allowed
