"""The Codex fixture sanitizer keeps structure and drops prose; the committed fixtures are clean."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from scripts.record_codex_fixtures import FIXTURES_DIR, SCENARIOS, sanitize_record
from scripts.responses_answers import CALL_ID, ENCRYPTED_CONTENT

FIXTURES = sorted(FIXTURES_DIR.glob("*/*.json"))
SESSION = "01a233ce-c21d-7ef1-bd61-44a14b8a50ca"
TURN = "01a233ce-62ef-7ef3-b851-bb7ae7be0a43"
UUID7 = r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}"


def _shape(node: Any) -> Any:
    """The tree with every string replaced by its length: what sanitizing must not change."""
    if isinstance(node, dict):
        return {key: _shape(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_shape(item) for item in node]
    if isinstance(node, str):
        return len(node)
    return node


def _record() -> dict[str, Any]:
    metadata = json.dumps({"session_id": SESSION, "turn_id": TURN, "agent_name": "/root"})
    return {
        "method": "POST",
        "path": "/v1/responses",
        "headers": {
            "host": "127.0.0.1:1",
            "content-length": "9",
            "authorization": "<redacted>",
            "session-id": SESSION,
            "x-codex-window-id": f"{SESSION}:0",
            "x-codex-turn-metadata": metadata,
            "originator": "codex_exec",
        },
        "body": {
            "model": "glm-5.3-flash",
            "input": [
                {
                    "type": "message",
                    "id": f"msg_{TURN}",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": "You are Codex at /data/alice."}],
                },
                {
                    "type": "reasoning",
                    "id": "rs_recorder0001",
                    "summary": [{"type": "summary_text", "text": "Reading it."}],
                    "content": [{"type": "reasoning_text", "text": "I will read it."}],
                    "encrypted_content": ENCRYPTED_CONTENT,
                },
                {
                    "type": "function_call",
                    "id": "fc_recorder0001",
                    "name": "close_agent",
                    "namespace": "multi_agent_v1",
                    "arguments": json.dumps({"target": "alice-agent"}),
                    "call_id": CALL_ID,
                },
                {"type": "function_call_output", "call_id": CALL_ID, "output": "secret words"},
                {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "x"},
                {"type": "custom_tool_call_output", "call_id": "c2", "output": "alice rejected"},
            ],
            "tools": [
                {
                    "type": "namespace",
                    "name": "multi_agent_v1",
                    "description": "Tools for alice.",
                    "tools": [
                        {
                            "type": "function",
                            "name": "close_agent",
                            "description": "Close it.",
                            "strict": False,
                            "parameters": {
                                "type": "object",
                                "properties": {"target": {"type": "string", "description": "Id"}},
                            },
                        }
                    ],
                },
                {
                    "type": "custom",
                    "name": "apply_patch",
                    "description": "Edit files.",
                    "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"},
                },
                {"type": "web_search", "external_web_access": False},
            ],
            "reasoning": {"summary": "auto"},
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": SESSION,
            "client_metadata": {"session_id": SESSION, "x-codex-turn-metadata": metadata},
        },
    }


def test_sanitize_record_keeps_structure_and_maps_ids_consistently() -> None:
    record = _record()
    sanitized = sanitize_record(record)
    assert _shape(sanitized["body"]) == _shape(record["body"])
    headers = sanitized["headers"]
    assert not {"host", "content-length"} & set(headers)
    assert headers["authorization"] == "<redacted>"
    assert headers["originator"] == "codex_exec"
    body = sanitized["body"]
    session = headers["session-id"]
    assert session != SESSION
    assert re.fullmatch(UUID7, session)
    assert body["prompt_cache_key"] == session
    assert headers["x-codex-window-id"] == f"{session}:0"
    metadata = json.loads(headers["x-codex-turn-metadata"])
    assert metadata["session_id"] == session
    assert metadata["agent_name"] == "/root"
    assert body["client_metadata"]["x-codex-turn-metadata"] == headers["x-codex-turn-metadata"]
    message, reasoning, call, _, _, _ = body["input"]
    assert message["id"] == f"msg_{metadata['turn_id']}"
    assert reasoning["encrypted_content"] == ENCRYPTED_CONTENT
    assert reasoning["id"] == "rs_recorder0001"
    assert (call["namespace"], call["name"], call["call_id"]) == (
        "multi_agent_v1",
        "close_agent",
        CALL_ID,
    )
    assert list(json.loads(call["arguments"])) == ["target"]
    namespace, custom, web_search = body["tools"]
    assert namespace["tools"][0]["parameters"]["properties"]["target"]["type"] == "string"
    assert custom["format"] == record["body"]["tools"][1]["format"]
    assert web_search == record["body"]["tools"][2]
    dumped = json.dumps(sanitized)
    for word in ("alice", "secret", "Codex", "Reading"):
        assert word not in dumped


def test_an_unknown_input_item_type_stops_the_rewrite() -> None:
    record = _record()
    record["body"]["input"].append({"type": "web_search_call", "action": {"query": "alice"}})
    with pytest.raises(SystemExit, match="web_search_call"):
        sanitize_record(record)


def test_every_scenario_has_a_first_turn_and_a_follow_up() -> None:
    for scenario in SCENARIOS:
        names = sorted(path.name for path in (FIXTURES_DIR / scenario.name).glob("*.json"))
        assert names == ["001-post-v1_responses.json", "002-post-v1_responses.json"]
        first, follow_up = (
            json.loads((FIXTURES_DIR / scenario.name / name).read_text())["body"] for name in names
        )
        # Codex resends the whole history: the first turn's input, then the new items.
        assert follow_up["input"][: len(first["input"])] == first["input"]
        new = follow_up["input"][len(first["input"]) :]
        reasoning, call, output = new
        assert reasoning["type"] == "reasoning"
        assert call["call_id"] == output["call_id"] == CALL_ID
        assert {key: value for key, value in follow_up.items() if key != "input"} == {
            key: value for key, value in first.items() if key != "input"
        }


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_is_a_clean_request(path: Path) -> None:
    text = path.read_text()
    record = json.loads(text)
    assert set(record) == {"method", "path", "headers", "body"}
    assert (record["method"], record["path"]) == ("POST", "/v1/responses")
    assert record["headers"]["authorization"] == "<redacted>"
    assert not {"host", "content-length"} & set(record["headers"])
    assert record["headers"]["session-id"] == record["body"]["prompt_cache_key"]
    for machine_path in ("/tmp/", "/work/", "/root/", "/home/"):
        assert machine_path not in text
