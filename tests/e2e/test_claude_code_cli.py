"""The real Claude Code CLI, headless, against the recording server (skipped without npm)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scripts.messages_answers import FINAL_TEXT, THINKING_SIGNATURE, THINKING_TEXT, TOOL_USE_ID
from scripts.record_agent_requests import serving
from tests.support.agent_cli import (
    INSTALL_TIMEOUT_S,
    HeadlessRun,
    claude_code_or_skip,
    headless_env,
    run_headless,
)

# The first use installs the CLI (one ~400 MB npm download).
pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_S + 120)

NOTES = "line one\nline two\n"


@pytest.fixture(scope="module")
def claude() -> Path:
    return claude_code_or_skip()


def _run(
    claude: Path, tmp_path: Path, tool_call: dict[str, Any], **kwargs: Any
) -> tuple[HeadlessRun, list[dict[str, Any]]]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(NOTES)
    records = tmp_path / "records"
    call = json.loads(json.dumps(tool_call).replace("{work}", str(work)))
    with serving(records, call) as server:
        env = headless_env(tmp_path / "home", server.url, "test-key-0123456789abcdef")
        run = run_headless(claude, "Read notes.txt", env=env, cwd=work, **kwargs)
    recorded = [json.loads(path.read_text()) for path in sorted(records.glob("*.json"))]
    return run, recorded


def test_read_round_trips_thinking_and_tool_result(claude: Path, tmp_path: Path) -> None:
    read = {"name": "Read", "input": {"file_path": "{work}/notes.txt"}}
    run, recorded = _run(claude, tmp_path, read)
    assert run.returncode == 0, run.stderr
    assert run.result is not None
    assert run.result["result"] == FINAL_TEXT
    assert run.result["num_turns"] == 2
    assert [(r["method"], r["path"]) for r in recorded] == [("POST", "/v1/messages?beta=true")] * 2
    first, follow_up = (r["body"] for r in recorded)
    assert first["stream"] is True
    assert first["system"][0]["text"].startswith("x-anthropic-billing-header: cc_version=")
    assert follow_up["system"] == first["system"]
    assistant = follow_up["messages"][-2]
    assert assistant["role"] == "assistant"
    # Our thinking comes back unmodified: text and signature both.
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": THINKING_TEXT,
        "signature": THINKING_SIGNATURE,
    }
    assert assistant["content"][1]["id"] == TOOL_USE_ID
    (result,) = follow_up["messages"][-1]["content"]
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == TOOL_USE_ID
    assert "line two" in result["content"]
    for record in recorded:  # both credential headers, never their values
        assert record["headers"]["x-api-key"] == "<redacted>"
        assert record["headers"]["authorization"] == "<redacted>"


def test_tool_needing_permission_is_denied_without_a_prompt(claude: Path, tmp_path: Path) -> None:
    bash = {"name": "Bash", "input": {"command": "echo hi > made.txt", "description": "write"}}
    run, recorded = _run(claude, tmp_path, bash)
    assert run.returncode == 0, run.stderr
    assert run.result is not None
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Bash"]
    assert not (tmp_path / "work" / "made.txt").exists()
    (result,) = recorded[-1]["body"]["messages"][-1]["content"]
    assert result["is_error"] is True


def test_bare_mode_sends_a_short_prompt(claude: Path, tmp_path: Path) -> None:
    read = {"name": "Read", "input": {"file_path": "{work}/notes.txt"}}
    run, recorded = _run(claude, tmp_path, read, bare=True)
    assert run.returncode == 0, run.stderr
    first = recorded[0]["body"]
    assert sorted(tool["name"] for tool in first["tools"]) == ["Bash", "Edit", "Read"]
    assert all(message["role"] != "system" for message in first["messages"])
