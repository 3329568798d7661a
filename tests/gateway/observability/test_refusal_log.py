"""Every request the gateway refuses leaves exactly one log line that says why: its request id,
the face, the status, the error code and the message; never the body, never the key."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from tests.gateway.conftest import MODEL, chat_body, gateway_client
from tests.gateway.fake_engine import FakeEngine, Script
from tests.gateway.test_counting_admission import HeldEngine

KEY = "sk-very-secret-key"
BODY_MARK = "do-not-log-this-prompt"


def lines_about(caplog: pytest.LogCaptureFixture, request_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if request_id in r.getMessage()]


def the_line(caplog: pytest.LogCaptureFixture, request_id: str) -> str:
    records = lines_about(caplog, request_id)
    assert len(records) == 1, [r.getMessage() for r in records]
    record = records[0]
    assert record.levelno in (logging.INFO, logging.WARNING)
    line = record.getMessage()
    assert KEY not in line
    assert BODY_MARK not in line
    return line


def rid(name: str) -> dict[str, str]:
    return {"x-request-id": name}


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)


def user(text: str = BODY_MARK) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def test_refusals_before_the_engine_log_one_line_each(
    engine: FakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    auth = {"authorization": f"Bearer {KEY}"}
    async with gateway_client(
        engine, api_keys=[KEY], rate_limits={"requests_per_minute": 3}
    ) as client:
        wrong = {"authorization": f"Bearer {KEY}-not"}
        response = await client.post(
            "/v1/chat/completions", json=chat_body(), headers={**wrong, **rid("auth-1")}
        )
        assert response.status_code == 401
        line = the_line(caplog, "auth-1")
        assert "face=/v1/chat/completions" in line
        assert "status=401" in line

        bad = chat_body(messages=[user()], reasoning_effort="extreme")
        response = await client.post(
            "/v1/chat/completions", json=bad, headers={**auth, **rid("invalid-1")}
        )
        assert response.status_code == 400
        line = the_line(caplog, "invalid-1")
        assert "status=400 code=invalid_value" in line
        assert "reasoning_effort" in line

        messages = {
            "model": MODEL,
            "max_tokens": 8,
            "messages": [user()],
            "thinking": {"type": "x"},
        }
        response = await client.post(
            "/v1/messages", json=messages, headers={**auth, **rid("invalid-2")}
        )
        assert response.status_code == 400
        assert "face=/v1/messages status=400" in the_line(caplog, "invalid-2")

        # The third request of the minute was the last one the key may send.
        response = await client.post(
            "/v1/responses",
            json={"model": MODEL, "input": "hi"},
            headers={**auth, **rid("rq-served")},
        )
        assert response.status_code == 200
        assert not lines_about(caplog, "rq-served")
        response = await client.post(
            "/v1/responses",
            json={"model": MODEL, "input": "hi"},
            headers={**auth, **rid("rq-rate")},
        )
        assert response.status_code == 429
        assert "face=/v1/responses status=429" in the_line(caplog, "rq-rate")


async def test_a_full_pool_logs_its_refusal(caplog: pytest.LogCaptureFixture) -> None:
    engine = HeldEngine(hold={"/generate"})
    async with gateway_client(engine, admission={"max_in_flight": 1, "max_queue": 0}) as client:
        held = asyncio.create_task(client.post("/v1/chat/completions", json=chat_body()))
        await engine.reached("/generate")
        busy = await client.post("/v1/chat/completions", json=chat_body(), headers=rid("busy-1"))
        engine.release.set()
        assert (await held).status_code == 200
    assert busy.status_code == 429
    assert "face=/v1/chat/completions status=429" in the_line(caplog, "busy-1")


async def test_an_engine_failure_logs_a_warning(
    engine: FakeEngine, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    engine.script = Script(status=500)
    response = await client.post(
        "/v1/chat/completions", json=chat_body(messages=[user()]), headers=rid("engine-1")
    )
    assert response.status_code >= 500
    [record] = lines_about(caplog, "engine-1")
    assert record.levelno == logging.WARNING
    assert f"status={response.status_code}" in record.getMessage()
