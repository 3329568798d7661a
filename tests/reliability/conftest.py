"""Real processes on loopback for the reliability tests: simulators and gateways."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest

from tests.support.procs import Proc, start_gateway, start_sim

MODEL = "glm-5.3-flash"
BASE_ENV = {
    "FLASHBOX_UPSTREAM__FORWARD_CUSTOM_PARAMS": "true",
    "FLASHBOX_HEALTH__INTERVAL_S": "0.2",
    "FLASHBOX_LIMITS__MAX_BODY_BYTES": "4000000",
    "FLASHBOX_LIMITS__MAX_MESSAGES": "1000",
    "FLASHBOX_LIMITS__MAX_TOOLS": "100",
    "FLASHBOX_API_KEYS": "",
    # Short deadlines so a stalled engine shows up within a test.
    "FLASHBOX_TIMEOUTS__FIRST_TOKEN_S": "3",
    "FLASHBOX_TIMEOUTS__STREAM_IDLE_S": "2",
}


def gateway_env(**extra: str) -> dict[str, str]:
    return {**BASE_ENV, **extra}


@pytest.fixture(scope="module")
def sim() -> Iterator[Proc]:
    proc = start_sim()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def gateway(sim: Proc) -> Iterator[Proc]:
    proc = start_gateway([sim.url], env=gateway_env())
    try:
        yield proc
    finally:
        proc.stop()


def chat_body(content: str = "hi", **extra: object) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 16,
        **extra,
    }


def sim_params(**sim: object) -> dict[str, Any]:
    return {"custom_params": {"sim": sim}}


def metric(proc: Proc, name: str, labels: Mapping[str, str] | None = None) -> float:
    """One sample of the gateway's (or the simulator's) /metrics; 0 when absent."""
    text = httpx.get(proc.url + "/metrics", timeout=5).text
    want = labels or {}
    total = 0.0
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if not match or match.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(got.get(k) == v for k, v in want.items()):
            total += float(match.group(3))
    return total


def assert_openai_error(response: httpx.Response) -> dict[str, object]:
    """A 4xx in OpenAI's shape whose message says something (what to fix)."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    body = response.json()
    error = body["error"]
    assert isinstance(error["message"], str), body
    assert len(error["message"]) > 10, body
    assert isinstance(error["type"], str)
    assert "param" in error
    assert "code" in error
    return dict(error)


def assert_healthy(gateway: Proc) -> None:
    assert gateway.alive(), gateway.log()[-3000:]
    assert httpx.get(gateway.url + "/health", timeout=5).status_code == 200
    response = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["finish_reason"] in ("stop", "length")
