"""The fixture sanitizer keeps structure and drops prose; the committed fixtures hold no leaks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from scripts.fixture_synth import synth_text
from scripts.record_claude_code_fixtures import FIXTURES_DIR, sanitize_record, synth_id

FIXTURES = sorted(FIXTURES_DIR.glob("*/*.json"))
BILLING = "x-anthropic-billing-header: cc_version=2.1.332.344; cc_entrypoint=sdk-cli;"


def _shape(node: Any) -> Any:
    """The tree with every string replaced by its length: what sanitizing must not change."""
    if isinstance(node, dict):
        return {key: _shape(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_shape(item) for item in node]
    if isinstance(node, str):
        return len(node)
    return node


def test_synth_text_keeps_shape_and_drops_words() -> None:
    text = (
        "<system-reminder>\nRead the file at /data/alice/notes.txt (2 lines).\n</system-reminder>"
    )
    synthetic = synth_text(text)
    assert len(synthetic) == len(text)
    assert synthetic.startswith("<system-reminder>\n")
    assert synthetic.endswith("</system-reminder>")
    assert re.sub(r"[A-Za-z]", "x", synthetic) == re.sub(r"[A-Za-z]", "x", text)
    assert "alice" not in synthetic
    assert "notes" not in synthetic
    assert synth_text(text) == synthetic  # deterministic, so shared prefixes stay shared


def test_synth_id_keeps_format() -> None:
    session = "6c8868a7-3c35-4c4b-a2de-c58d91feb7c4"
    synthetic = synth_id(session)
    assert synthetic != session
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-a[0-9a-f]{3}-[0-9a-f]{12}", synthetic
    )
    assert re.fullmatch(r"a[0-9a-f]{16}", synth_id("a051c6d5f1775d059"))


def test_sanitize_record_keeps_structure() -> None:
    user_id = {
        "device_id": "ab" * 32,
        "account_uuid": "",
        "session_id": "6c8868a7-3c35-4c4b-a2de-c58d91feb7c4",
    }
    record = {
        "method": "POST",
        "path": "/v1/messages?beta=true",
        "headers": {
            "host": "127.0.0.1:1",
            "content-length": "9",
            "x-claude-code-session-id": user_id["session_id"],
        },
        "body": {
            "model": "glm-5.3-flash",
            "system": [
                {
                    "type": "text",
                    "text": BILLING,
                },
                {
                    "type": "text",
                    "text": "You are an agent.",
                    "cache_control": {"type": "ephemeral"},
                },
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Read notes.txt"}]},
                {"role": "system", "content": "Primary working directory: /data/alice"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "I will read it.", "signature": "sig-1"},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "Read",
                            "input": {"file_path": "/data/alice/notes.txt"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1\tsecret"}
                    ],
                },
            ],
            "tools": [
                {
                    "name": "Read",
                    "description": "Reads a file.",
                    "input_schema": {
                        "type": "object",
                        "properties": {"file_path": {"type": "string", "description": "Path"}},
                    },
                }
            ],
            "metadata": {"user_id": json.dumps(user_id, separators=(",", ":"))},
            "thinking": {"type": "adaptive", "display": "omitted"},
        },
    }
    sanitized = sanitize_record(record)
    assert _shape(sanitized["body"]) == _shape(record["body"])
    assert set(sanitized["headers"]) == {"x-claude-code-session-id"}
    body = sanitized["body"]
    assert body["system"][0]["text"].startswith("x-anthropic-billing-header: cc_version=2.1.332.")
    assert body["system"][0]["text"].endswith("; cc_entrypoint=sdk-cli;")
    assert body["messages"][2]["content"][0]["signature"] == "sig-1"
    assert body["tools"][0]["name"] == "Read"
    session = json.loads(body["metadata"]["user_id"])["session_id"]
    assert session == sanitized["headers"]["x-claude-code-session-id"] != user_id["session_id"]
    dumped = json.dumps(sanitized)
    assert "alice" not in dumped
    assert "secret" not in dumped


def test_fixtures_exist() -> None:
    assert {path.parent.name for path in FIXTURES} >= {"read", "bare_read", "subagent"}


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_is_a_clean_request(path: Path) -> None:
    text = path.read_text()
    record = json.loads(text)
    assert set(record) == {"method", "path", "headers", "body"}
    for name in ("authorization", "x-api-key"):
        assert record["headers"].get(name, "<redacted>") == "<redacted>"
    assert not {"host", "content-length"} & set(record["headers"])
    for machine_path in ("/tmp/", "/work/", "/root/", "/home/"):
        assert machine_path not in text
