"""Re-record tests/fixtures/claude_code/: real Claude Code requests with synthetic prose.

    python -m scripts.record_claude_code_fixtures [--out DIR] [--keep-raw DIR]

Runs the pinned CLI (tests/support/agent_cli.py) headless against the recording server of
scripts/record_agent_requests.py, once per scenario, then rewrites every recorded request.
Prose (system prompt text, tool and schema descriptions, user text, file contents, thinking
text, tool inputs) becomes synthetic text of the same length and shape
(scripts/fixture_synth.py): each word becomes a made-up word of the same length and case;
digits, punctuation, whitespace and tags such as <system-reminder> stay. Ids (session, prompt,
agent, device, the billing block's fingerprint) become synthetic ids of the same format.
Structure is kept exactly: block types and order, cache_control, the billing block's format,
role "system" messages, tool names and schemas, top-level fields, and headers (less host and
content-length, which describe the recording's connection; credential headers are recorded
with a placeholder value).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts import fixture_synth
from scripts.fixture_synth import record_all, synth_schema, synth_text, synth_values
from scripts.record_agent_requests import serving
from tests.support.agent_cli import (
    CLAUDE_CODE_VERSION,
    headless_env,
    install_claude_code,
    run_headless,
)
from tests.support.procs import REPO_ROOT

FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures" / "claude_code"
API_KEY = "flashbox-recording-key-0000"
NOTES_TEXT = "The build passes on the second try.\nCheck the cache folder first.\n"
DROPPED_HEADERS = frozenset({"host", "content-length"})
AGENT_ID = re.compile(r"^a[0-9a-f]{16}$")
BILLING_PREFIX = "x-anthropic-billing-header: "


@dataclass(frozen=True)
class Scenario:
    """One headless run: its prompt, the tool the server's first answer calls, and its flags."""

    name: str
    prompt: str
    tool_call: Callable[[Path], dict[str, Any]]
    bare: bool = False
    hint_headers: bool = False


def _read_notes(work: Path) -> dict[str, Any]:
    return {"name": "Read", "input": {"file_path": str(work / "notes.txt")}}


def _explore_agent(work: Path) -> dict[str, Any]:
    return {
        "name": "Agent",
        "input": {
            "description": "Summarise the notes",
            "prompt": "Read notes.txt and summarise it in one line.",
            "subagent_type": "Explore",
            "run_in_background": False,
        },
    }


SCENARIOS = (
    Scenario("read", "Read notes.txt and tell me what it says.", _read_notes),
    Scenario("bare_read", "Read notes.txt and tell me what it says.", _read_notes, bare=True),
    Scenario(
        "subagent",
        "Ask an Explore agent to summarise notes.txt.",
        _explore_agent,
        hint_headers=True,
    ),
)


def synth_id(value: str) -> str:
    """A synthetic id in the same format; an agent id keeps its leading "a"."""
    return fixture_synth.synth_id(value, keep={0} if AGENT_ID.match(value) else ())


def synth_billing(text: str) -> str:
    """The billing block with its keys kept and the message fingerprint made synthetic."""
    fields = []
    for field in text.removeprefix(BILLING_PREFIX).split(";"):
        key, sep, value = field.partition("=")
        if key.strip() == "cc_version":
            version, _, fingerprint = value.rpartition(".")
            value = f"{version}.{synth_id(fingerprint)}"
        fields.append(f"{key}{sep}{value}")
    return BILLING_PREFIX + ";".join(fields)


def _synth_content(content: Any) -> Any:
    if isinstance(content, str):
        return synth_text(content)
    if not isinstance(content, list):
        return content
    blocks = []
    for block in content:
        block = dict(block)
        kind = block.get("type")
        if kind == "text":
            block["text"] = synth_text(block["text"])
        elif kind == "thinking":
            block["thinking"] = synth_text(block["thinking"])
        elif kind == "tool_use":
            block["input"] = synth_values(block["input"])
        elif kind == "tool_result" and "content" in block:
            block["content"] = _synth_content(block["content"])
        blocks.append(block)
    return blocks


def _synth_user_id(user_id: str) -> str:
    fields = json.loads(user_id)
    synthetic = {key: synth_id(value) if value else value for key, value in fields.items()}
    return json.dumps(synthetic, separators=(",", ":"))


def _synth_tool(tool: dict[str, Any]) -> dict[str, Any]:
    tool = dict(tool)
    if isinstance(tool.get("description"), str):
        tool["description"] = synth_text(tool["description"])
    if "input_schema" in tool:
        tool["input_schema"] = synth_schema(tool["input_schema"])
    return tool


def sanitize_body(body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    body = dict(body)
    system = body.get("system")
    if isinstance(system, str):
        body["system"] = synth_text(system)
    elif isinstance(system, list):
        body["system"] = [
            {
                **block,
                "text": synth_billing(block["text"])
                if block["text"].startswith(BILLING_PREFIX)
                else synth_text(block["text"]),
            }
            for block in system
        ]
    if "messages" in body:
        body["messages"] = [
            {**message, "content": _synth_content(message["content"])}
            for message in body["messages"]
        ]
    if "tools" in body:
        body["tools"] = [_synth_tool(tool) for tool in body["tools"]]
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        body["metadata"] = {**metadata, "user_id": _synth_user_id(metadata["user_id"])}
    return body


def sanitize_headers(headers: dict[str, str]) -> dict[str, str]:
    kept = {}
    for name, value in headers.items():
        if name in DROPPED_HEADERS:
            continue
        if name.startswith("x-claude-code-") and name.endswith("-id"):
            value = synth_id(value)
        kept[name] = value
    return kept


def sanitize_record(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "method": record["method"],
        "path": record["path"],
        "headers": sanitize_headers(record["headers"]),
        "body": sanitize_body(record["body"]),
    }


def record_scenario(claude: Path, scenario: Scenario, scratch: Path) -> Path:
    """Run one scenario against a fresh recording server; returns the folder of raw records."""
    work, home, raw = scratch / "work", scratch / "home", scratch / "raw"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text(NOTES_TEXT)
    with serving(raw, scenario.tool_call(work)) as server:
        env = headless_env(home, server.url, API_KEY, hint_headers=scenario.hint_headers)
        run = run_headless(claude, scenario.prompt, env=env, cwd=work, bare=scenario.bare)
    if run.returncode != 0 or run.result is None or run.result.get("is_error"):
        raise SystemExit(
            f"{scenario.name}: claude exited {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr}"
        )
    print(f"{scenario.name}: {run.result.get('result')!r}; stderr: {run.stderr.strip()!r}")
    return raw


def main() -> int:
    claude = install_claude_code()
    if isinstance(claude, str):
        print(claude, file=sys.stderr)
        return 1
    by_name = {scenario.name: scenario for scenario in SCENARIOS}

    def record(name: str, scratch: Path) -> Path:
        return record_scenario(claude, by_name[name], scratch)

    print(f"claude {CLAUDE_CODE_VERSION}")
    description = (__doc__ or "").split("\n\n")[0]
    return record_all(description, FIXTURES_DIR, list(by_name), record, sanitize_record, API_KEY)


if __name__ == "__main__":
    raise SystemExit(main())
