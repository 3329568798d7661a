"""The real Codex CLI, headless, against the recorder's Responses mode (skipped without npm).

What these pin down about Codex 0.171.0 is written up in tests/fixtures/codex/README.md.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from scripts.record_agent_requests import serving
from scripts.responses_answers import (
    CALL_ID,
    CUSTOM_CALL_ID,
    ENCRYPTED_CONTENT,
    FINAL_TEXT,
    FUNCTION_CALL_ID,
    REASONING_ID,
    REASONING_SUMMARY,
    REASONING_TEXT,
)
from tests.support.codex_cli import (
    API_KEY_ENV,
    CODEX_VERSION,
    CodexRun,
    TomlValue,
    codex_env,
    codex_or_skip,
    install_codex,
    run_codex,
    write_model_catalog,
)
from tests.support.npm_cli import INSTALL_TIMEOUT_S

# The first use installs the CLI (one ~400 MB npm download).
pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_S + 120)

NOTES = "line one\nline two\n"
KEY = "codex-test-key-0123456789abcdef"
PATCH = "*** Begin Patch\n*** Add File: made.txt\n+hello\n*** End Patch\n"


@pytest.fixture(scope="module")
def codex() -> Path:
    return codex_or_skip()


def _run(
    codex: Path, tmp_path: Path, tool_call: dict[str, Any], *, catalog: bool = False
) -> tuple[CodexRun, list[dict[str, Any]]]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(NOTES)
    records = tmp_path / "records"
    top_level: dict[str, TomlValue] = {}
    if catalog:
        top_level = write_model_catalog(tmp_path / "catalog.json")
    with serving(records, tool_call) as server:
        env = codex_env(tmp_path / "home", f"{server.url}/v1", KEY, top_level=top_level)
        run = run_codex(codex, "Read notes.txt", env=env, cwd=work)
    recorded = [json.loads(path.read_text()) for path in sorted(records.glob("*.json"))]
    return run, recorded


def _new_items(recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the follow-up request adds to the first one's input (which it repeats unchanged)."""
    first, follow_up = (record["body"]["input"] for record in recorded)
    assert follow_up[: len(first)] == first
    return list(follow_up[len(first) :])


def _reasoning_sent() -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": REASONING_ID,
        "summary": [{"type": "summary_text", "text": REASONING_SUMMARY}],
        "content": [{"type": "reasoning_text", "text": REASONING_TEXT}],
        "encrypted_content": ENCRYPTED_CONTENT,
    }


def test_shell_call_round_trips_reasoning_and_output(codex: Path, tmp_path: Path) -> None:
    run, recorded = _run(
        codex, tmp_path, {"name": "exec_command", "input": {"cmd": "cat notes.txt"}}
    )
    assert run.returncode == 0, run.stderr
    assert run.final_message == FINAL_TEXT
    (command,) = run.items("command_execution")
    assert command["exit_code"] == 0
    assert command["aggregated_output"] == NOTES
    assert [(r["method"], r["path"]) for r in recorded] == [("POST", "/v1/responses")] * 2
    first = recorded[0]["body"]
    assert "instructions" not in first  # the base prompt is the first developer message
    assert first["input"][0]["role"] == "developer"
    assert first["stream"] is True
    assert first["store"] is False
    assert first["include"] == ["reasoning.encrypted_content"]
    assert first["reasoning"] == {"summary": "auto"}  # fallback metadata: no effort
    tool_types = {tool["type"] for tool in first["tools"]}
    assert {"function", "namespace", "web_search"} <= tool_types
    headers = recorded[0]["headers"]
    assert headers["authorization"] == "<redacted>"
    assert headers["originator"] == "codex_exec"
    assert headers["user-agent"].startswith(f"codex_exec/{CODEX_VERSION} ")
    assert headers["session-id"] == first["prompt_cache_key"]
    reasoning, call, output = _new_items(recorded)
    assert reasoning == _reasoning_sent()  # every field back as sent, id included
    assert call == {
        "type": "function_call",
        "status": "completed",
        "id": FUNCTION_CALL_ID,
        "name": "exec_command",
        "arguments": json.dumps({"cmd": "cat notes.txt"}),
        "call_id": CALL_ID,
    }
    assert output["type"] == "function_call_output"
    assert output["call_id"] == CALL_ID
    assert output["id"].startswith("fco_")
    assert output["output"].endswith("Output:\n" + NOTES)


def test_namespaced_call_keeps_its_namespace(codex: Path, tmp_path: Path) -> None:
    close = {"name": "close_agent", "namespace": "multi_agent_v1", "input": {"target": "agent-1"}}
    run, recorded = _run(codex, tmp_path, close)
    assert run.returncode == 0, run.stderr
    _, call, output = _new_items(recorded)
    assert call["name"] == "close_agent"
    assert call["namespace"] == "multi_agent_v1"
    # The tool ran (and refused the made-up id): Codex resolved (namespace, name).
    assert output["call_id"] == CALL_ID
    assert output["output"].startswith("invalid agent id agent-1")


def test_catalog_model_gets_effort_and_a_custom_apply_patch(codex: Path, tmp_path: Path) -> None:
    run, recorded = _run(codex, tmp_path, {"name": "apply_patch", "input": PATCH}, catalog=True)
    assert run.returncode == 0, run.stderr
    assert run.items("error") == []  # no "model metadata not found" warning
    first = recorded[0]["body"]
    assert first["reasoning"] == {"effort": "high", "summary": "auto"}
    (custom,) = (tool for tool in first["tools"] if tool["type"] == "custom")
    assert custom["name"] == "apply_patch"
    assert custom["format"]["type"] == "grammar"
    assert custom["format"]["syntax"] == "lark"
    _, call, output = _new_items(recorded)
    assert call == {
        "type": "custom_tool_call",
        "id": CUSTOM_CALL_ID,
        "status": "completed",
        "call_id": CALL_ID,
        "name": "apply_patch",
        "input": PATCH,
    }
    assert output["type"] == "custom_tool_call_output"
    assert "read-only sandbox" in output["output"]
    assert not (tmp_path / "work" / "made.txt").exists()


def test_config_selects_the_provider_and_turns_off_other_traffic(tmp_path: Path) -> None:
    top_level = write_model_catalog(tmp_path / "catalog.json")
    env = codex_env(tmp_path / "home", "http://127.0.0.1:9/v1", KEY, top_level=top_level)
    assert env[API_KEY_ENV] == KEY
    assert set(env) == {"PATH", "HOME", "CODEX_HOME", "TMPDIR", "LANG", API_KEY_ENV}
    config = tomllib.loads((Path(env["CODEX_HOME"]) / "config.toml").read_text())
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == "http://127.0.0.1:9/v1"
    assert provider["wire_api"] == "responses"
    assert provider["env_key"] == API_KEY_ENV
    assert provider["supports_websockets"] is False
    assert config["features"] == {"plugins": False}
    assert config["check_for_update_on_startup"] is False
    catalog = json.loads(Path(config["model_catalog_json"]).read_text())
    assert [entry["slug"] for entry in catalog["models"]] == [config["model"]]


def test_without_npm_the_install_gives_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    found = install_codex(tmp_path / "cache")
    assert isinstance(found, str)
    assert "npm is not on PATH" in found
