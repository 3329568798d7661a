"""Re-record tests/fixtures/codex/: real Codex CLI requests with synthetic prose.

    python -m scripts.record_codex_fixtures [--out DIR] [--keep-raw DIR]

Runs the pinned CLI (tests/support/codex_cli.py) headless against the Responses mode of
scripts/record_agent_requests.py, once per scenario, then rewrites every recorded request with
scripts/fixture_synth.py. Prose (message text, tool and schema descriptions, reasoning text,
tool arguments and inputs, tool outputs, instructions) becomes synthetic text of the same
length and shape; every UUID (session, thread, turn, window, installation, item ids, the
prompt_cache_key, the turn metadata) becomes a synthetic UUID, the same one in every file.
Structure is kept exactly: item types, roles and order, tool types, names, schemas, namespaces
and the custom tool's grammar, top-level fields, and headers (less host and content-length,
which describe the recording's connection; the credential header holds a placeholder).
Our own values pass through: the reasoning item's ids and `encrypted_content`, call ids.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.fixture_synth import (
    Record,
    record_all,
    synth_schema,
    synth_text,
    synth_uuids,
    synth_values,
)
from scripts.record_agent_requests import serving
from scripts.responses_answers import FINAL_TEXT
from tests.support.codex_cli import (
    CODEX_VERSION,
    TomlValue,
    codex_env,
    install_codex,
    run_codex,
    write_model_catalog,
)
from tests.support.procs import REPO_ROOT

FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures" / "codex"
API_KEY = "flashbox-recording-key-0000"
NOTES_TEXT = "The build passes on the second try.\nCheck the cache folder first.\n"
DROPPED_HEADERS = frozenset({"host", "content-length"})
PATCH = "*** Begin Patch\n*** Add File: made.txt\n+hello\n*** End Patch\n"


@dataclass(frozen=True)
class Scenario:
    """One headless run: its prompt, the call the server's first answer makes, its config."""

    name: str
    prompt: str
    tool_call: dict[str, Any]
    catalog: bool = False


SCENARIOS = (
    Scenario(
        "exec",
        "Read notes.txt and tell me what it says.",
        {"name": "exec_command", "input": {"cmd": "cat notes.txt"}},
    ),
    Scenario(
        "namespace",
        "Close the agent you started.",
        {"name": "close_agent", "namespace": "multi_agent_v1", "input": {"target": "agent-1"}},
    ),
    Scenario(
        "catalog_custom",
        "Add a file made.txt that says hello.",
        {"name": "apply_patch", "input": PATCH},
        catalog=True,
    ),
)


def _synth_parts(content: Any) -> Any:
    """A message's or tool output's content: a string, or parts whose `text` is prose."""
    if isinstance(content, str):
        return synth_text(content)
    if not isinstance(content, list):
        return content
    return [
        {**part, "text": synth_text(part["text"])}
        if isinstance(part, dict) and isinstance(part.get("text"), str)
        else part
        for part in content
    ]


def _synth_arguments(arguments: str) -> str:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return synth_text(arguments)
    # The recorder wrote them with json.dumps defaults, so this keeps the exact format.
    return json.dumps(synth_values(parsed))


def _synth_item(item: dict[str, Any]) -> dict[str, Any]:
    item = dict(item)
    if isinstance(item.get("id"), str):
        item["id"] = synth_uuids(item["id"])
    kind = item.get("type")
    # An item with a role and no type is a message too (the SDKs' short form).
    if kind == "message" or (kind is None and "role" in item):
        item["content"] = _synth_parts(item["content"])
    elif kind == "reasoning":
        for key in ("summary", "content"):
            if isinstance(item.get(key), list):
                item[key] = _synth_parts(item[key])
    elif kind == "function_call":
        item["arguments"] = _synth_arguments(item["arguments"])
    elif kind == "custom_tool_call":
        item["input"] = synth_text(item["input"])
    elif kind in ("function_call_output", "custom_tool_call_output"):
        item["output"] = _synth_parts(item["output"])
    elif kind == "item_reference":
        pass  # an id only: rewritten above
    else:
        raise SystemExit(f"no rule to sanitize an input item of type {kind!r}; add one")
    return item


def _synth_tool(tool: dict[str, Any]) -> dict[str, Any]:
    tool = dict(tool)
    if isinstance(tool.get("description"), str):
        tool["description"] = synth_text(tool["description"])
    if "parameters" in tool:
        tool["parameters"] = synth_schema(tool["parameters"])
    if isinstance(tool.get("tools"), list):  # a namespace's members
        tool["tools"] = [_synth_tool(member) for member in tool["tools"]]
    return tool


def _synth_ids(node: Any) -> Any:
    """Every UUID inside every string of a tree replaced; nothing else changed."""
    if isinstance(node, str):
        return synth_uuids(node)
    if isinstance(node, dict):
        return {key: _synth_ids(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_synth_ids(item) for item in node]
    return node


def sanitize_body(body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    body = dict(body)
    if isinstance(body.get("instructions"), str):
        body["instructions"] = synth_text(body["instructions"])
    if isinstance(body.get("input"), str):
        body["input"] = synth_text(body["input"])
    elif isinstance(body.get("input"), list):
        body["input"] = [_synth_item(item) for item in body["input"]]
    if isinstance(body.get("tools"), list):
        body["tools"] = [_synth_tool(tool) for tool in body["tools"]]
    if isinstance(body.get("text"), dict):
        body["text"] = synth_schema(body["text"])
    for key in ("prompt_cache_key", "client_metadata", "metadata"):
        if key in body:
            body[key] = _synth_ids(body[key])
    return body


def sanitize_headers(headers: dict[str, str]) -> dict[str, str]:
    return {
        name: synth_uuids(value) for name, value in headers.items() if name not in DROPPED_HEADERS
    }


def sanitize_record(record: Record) -> Record:
    return {
        "method": record["method"],
        "path": record["path"],
        "headers": sanitize_headers(record["headers"]),
        "body": sanitize_body(record["body"]),
    }


def record_scenario(codex: Path, scenario: Scenario, scratch: Path) -> Path:
    """Run one scenario against a fresh recording server; returns the folder of raw records."""
    work, home, raw = scratch / "work", scratch / "home", scratch / "raw"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text(NOTES_TEXT)
    top_level: dict[str, TomlValue] = {}
    if scenario.catalog:
        top_level = write_model_catalog(scratch / "catalog.json")
    with serving(raw, scenario.tool_call) as server:
        env = codex_env(home, f"{server.url}/v1", API_KEY, top_level=top_level)
        run = run_codex(codex, scenario.prompt, env=env, cwd=work)
    if run.returncode != 0 or run.final_message != FINAL_TEXT:
        raise SystemExit(
            f"{scenario.name}: codex exited {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr}"
        )
    said = [(item["type"], item.get("message") or item.get("text")) for item in run.items("error")]
    print(f"{scenario.name}: {run.final_message!r}; error items: {said}")
    return raw


def main() -> int:
    codex = install_codex()
    if isinstance(codex, str):
        print(codex, file=sys.stderr)
        return 1
    by_name = {scenario.name: scenario for scenario in SCENARIOS}

    def record(name: str, scratch: Path) -> Path:
        return record_scenario(codex, by_name[name], scratch)

    print(f"codex {CODEX_VERSION}")
    description = (__doc__ or "").split("\n\n")[0]
    return record_all(description, FIXTURES_DIR, list(by_name), record, sanitize_record, API_KEY)


if __name__ == "__main__":
    raise SystemExit(main())
