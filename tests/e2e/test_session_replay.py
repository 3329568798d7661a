"""The recorded long sessions of the real CLIs, replayed through the gateway (fast suite).

tests/fixtures/sessions/<client>/ holds every request Claude Code, Codex and opencode sent in a
session of resumed turns with two subagents at once and a compaction the client made itself
(scripts/record_cli_sessions.py; tests/e2e/test_cli_sessions.py runs the CLIs themselves).
Replayed in the order they came, each must be answered 2xx, and routing must keep every
conversation on its checkpoint: no verified miss, each subagent its own lineage, and the
conversation after a compaction a new or restarted lineage, never a miss.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import sim_and_gateway
from tests.support.metrics import affinity_outcomes
from tests.support.procs import Proc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sessions"
KEY = "replay-key-0123456789abcdef"
CREDENTIALS = ("authorization", "x-api-key")
# Headers that describe the recorded connection, not the request.
_CONNECTION = ("host", "content-length", "accept-encoding", "connection")


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Proc, Proc]]:
    env = {"FLASHBOX_API_KEYS": KEY, "FLASHBOX_LIMITS__MAX_BODY_BYTES": str(4 << 20)}
    yield from sim_and_gateway("--reasoning-tokens", "8", "--content-tokens", "16", env=env)


def _records(client: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((FIXTURES / client).glob("*.json"))]


def _replay(gateway: Proc, client: str) -> tuple[list[str], dict[tuple[str, str], float]]:
    before = affinity_outcomes(gateway.url)
    failures = []
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        for n, record in enumerate(_records(client), 1):
            headers = {
                k: v
                for k, v in record["headers"].items()
                if k not in CREDENTIALS and k not in _CONNECTION
            }
            headers["authorization"] = f"Bearer {KEY}"
            headers["x-api-key"] = KEY
            response = http.request(
                record["method"], record["path"], headers=headers, json=record["body"]
            )
            if not 200 <= response.status_code < 300:
                failures.append(f"{n:03d} {record['path']}: {response.status_code} {response.text}")
    after = affinity_outcomes(gateway.url)
    return failures, {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k)}


@pytest.mark.parametrize("client", ["claude-code", "codex", "opencode"])
def test_a_recorded_long_session_is_served_and_keeps_its_checkpoints(
    stack: tuple[Proc, Proc], client: str
) -> None:
    _, gateway = stack
    failures, outcomes = _replay(gateway, client)
    assert failures == []
    misses = {k: v for k, v in outcomes.items() if k[0] in ("verified_miss", "head_miss")}
    assert misses == {}, outcomes
    assert outcomes.get(("hit", "main"), 0) >= 5, outcomes
    # The first turn started two subagents at once: each is its own lineage, and both go on.
    assert outcomes.get(("new", "subagent"), 0) == 2, outcomes
    assert outcomes.get(("hit", "subagent"), 0) >= 2, outcomes
    # The compaction: the conversation after it starts again (new, or restarted in place).
    restarts = outcomes.get(("new", "main"), 0) + outcomes.get(("restarted", "main"), 0)
    assert restarts >= 2, outcomes
