"""The recorded long sessions of the real CLIs, replayed through the gateway (fast suite).

tests/fixtures/sessions/<client>/ holds every request Claude Code, Codex and opencode sent in a
session of resumed turns with two subagents at once and a compaction the client made itself
(scripts/record_cli_sessions.py; tests/e2e/test_cli_sessions.py runs the CLIs themselves).
Replayed in the order they came, each must be answered 2xx, and routing must keep every
conversation on its checkpoint: no verified miss, each subagent its own lineage, and the
conversation after a compaction a new or restarted lineage, never a miss.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import sim_and_gateway
from tests.support.procs import Proc
from tests.support.replay import load_records, replay

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sessions"
KEY = "replay-key-0123456789abcdef"


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Proc, Proc]]:
    env = {"FLASHBOX_API_KEYS": KEY, "FLASHBOX_LIMITS__MAX_BODY_BYTES": str(4 << 20)}
    yield from sim_and_gateway("--reasoning-tokens", "8", "--content-tokens", "16", env=env)


@pytest.mark.parametrize("client", ["claude-code", "codex", "opencode"])
def test_a_recorded_long_session_is_served_and_keeps_its_checkpoints(
    stack: tuple[Proc, Proc], client: str
) -> None:
    _, gateway = stack
    failures, outcomes = replay(gateway.url, load_records(FIXTURES / client), KEY)
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
