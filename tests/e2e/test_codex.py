"""Codex against gateway + simulator: recorded request bodies, and the real CLI headless.

The fixtures are Codex 0.171.0's own requests (tests/fixtures/codex/README.md says how they were
recorded and made synthetic), replayed with their headers: each must stream to completion. The
CLI run is skipped, saying why, where npm or the registry is missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.agent_stack import agent_stack, refused
from tests.e2e.conftest import metric_sum
from tests.support.codex_cli import codex_env, codex_or_skip, run_codex
from tests.support.npm_cli import INSTALL_TIMEOUT_S
from tests.support.procs import REPO_ROOT, Proc

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "codex"
KEY = "codex-test-key-0123456789abcdef"
DROPPED = {"authorization", "accept-encoding", "content-length", "host"}


@pytest.fixture(scope="module")
def gateway() -> Iterator[Proc]:
    with agent_stack(KEY) as proc:
        yield proc


def _events(text: str) -> list[dict[str, Any]]:
    out = []
    for frame in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "data" in lines:
            data = json.loads(lines["data"])
            assert lines["event"] == data["type"]
            out.append(data)
    return out


@pytest.mark.parametrize(
    "path", sorted(FIXTURES.glob("*/*.json")), ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_recorded_codex_requests_are_served(gateway: Proc, path: Path) -> None:
    recorded = json.loads(path.read_text())
    headers = {k: v for k, v in recorded["headers"].items() if k not in DROPPED}
    headers["authorization"] = f"Bearer {KEY}"
    response = httpx.post(
        gateway.url + recorded["path"], json=recorded["body"], headers=headers, timeout=60
    )
    assert response.status_code == 200, response.text
    events = _events(response.text)
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] == "response.completed"
    numbers = [e["sequence_number"] for e in events]
    assert numbers == sorted(set(numbers))
    final = events[-1]["response"]
    assert final["model"] == recorded["body"]["model"]
    kinds = [item["type"] for item in final["output"]]
    assert kinds[0] == "reasoning"
    assert "message" in kinds
    assert final["output"][0]["encrypted_content"]
    assert final["usage"]["input_tokens"] > 0


@pytest.fixture(scope="module")
def codex() -> Path:
    return codex_or_skip()


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 180)
def test_the_real_cli_runs_headless_against_the_gateway(
    codex: Path, gateway: Proc, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("line one\nline two\n")
    before = metric_sum(gateway, "flashbox_requests_total", {"api": "responses", "code": "200"})
    env = codex_env(tmp_path / "home", f"{gateway.url}/v1", KEY)
    run = run_codex(codex, "Summarise notes.txt in one line.", env=env, cwd=work)
    assert run.returncode == 0, (run.stdout, run.stderr)
    kinds = [event.get("type") for event in run.events]
    assert "turn.completed" in kinds, run.stdout
    assert "turn.failed" not in kinds, run.stdout
    assert (run.final_message or "").strip()
    served = metric_sum(gateway, "flashbox_requests_total", {"api": "responses", "code": "200"})
    assert served > before
    assert not refused(gateway, "responses")
