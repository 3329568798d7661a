"""Long sessions of the real Claude Code, Codex and opencode through the gateway (`make
test-full`; skipped without npm). The fast suite replays what they sent
(tests/e2e/test_session_replay.py).

Each CLI runs its scenario (tests/support/cli_sessions.py) over the scripted simulator: turn
after turn continued by its own resume flag, the first turn reading a file and starting two
subagents at once, the context small enough that the client compacts by itself. Asserted: every
turn's CLI run succeeds, every request it sent was answered 2xx (a recording proxy in front of
the gateway keeps the error of any that was not), it compacted, and routing kept every
conversation on its checkpoint (the gateway's flashbox_affinity_total).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.record_session_shape import CLIENTS
from tests.support.cli_sessions import SCENARIOS, run_scenario
from tests.support.npm_cli import INSTALL_TIMEOUT_S

# The first use installs each CLI (an npm download each).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(INSTALL_TIMEOUT_S + 600)]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_long_session_compacts_resumes_and_keeps_its_checkpoints(
    name: str, tmp_path: Path
) -> None:
    client = CLIENTS[name]
    executable = client.install()
    if isinstance(executable, str):
        pytest.skip(executable)
    report, _ = run_scenario(client, executable, tmp_path)
    assert report.turns == sum(len(s.prompts) for s in SCENARIOS[name])
    assert report.failed == []
    # 499: the client hung up on a stream it no longer wanted (Codex closes finished agents).
    assert set(report.refused) <= {"499"}, report.codes
    assert report.compactions >= 1
    assert report.outcome("verified_miss") == 0, (report.affinity, report.log)
    assert report.outcome("head_miss") == 0, report.affinity
    assert report.outcome("hit", "main") >= 5, report.affinity
    assert report.outcome("new", "subagent") == 2, report.affinity
    assert report.outcome("new", "main") + report.outcome("restarted", "main") >= 2
    print(
        f"{name}: {report.turns} turns, {report.requests_sent} requests, "
        f"{report.compactions} compactions, outcomes "
        f"{ {f'{o}/{k}': int(n) for (o, k), n in report.affinity.items() if n} }"
    )
