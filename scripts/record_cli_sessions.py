"""Record the requests of the real CLIs' long sessions through the gateway, as fixtures.

    python -m scripts.record_cli_sessions [--client claude-code|codex|opencode ...] [--out DIR]

Runs each client's scenario (tests/support/cli_sessions.py: resumed turns, two subagents at
once, compaction by the client itself) against the gateway over the scripted simulator, and
writes every request the CLI sent, in arrival order, to `DIR/<client>/NNN-<method>-<path>.json`
(default DIR: tests/fixtures/sessions). Text is rewritten as the other fixtures' is
(scripts/fixture_synth.py: same lengths and shapes, same words mapped alike so shared prefixes
stay shared); structure, tools, headers and ids' shapes are as sent. The fast suite replays them
(tests/e2e/test_session_replay.py). Needs npm and the registry the first time (the CLIs).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from scripts import record_claude_code_fixtures, record_codex_fixtures
from scripts.fixture_synth import Record, synth_schema, synth_text, synth_uuids, write_fixtures
from scripts.record_session_shape import API_KEY, CLIENTS
from tests.support.cli_sessions import SCENARIOS, run_scenario
from tests.support.procs import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "sessions"


def _chat_content(content: Any) -> Any:
    if isinstance(content, str):
        return synth_text(content)
    if isinstance(content, list):
        return [
            {**part, "text": synth_text(part["text"])}
            if isinstance(part, dict) and isinstance(part.get("text"), str)
            else part
            for part in content
        ]
    return content


def _chat_message(message: dict[str, Any]) -> dict[str, Any]:
    message = {**message, "content": _chat_content(message.get("content"))}
    if isinstance(message.get("reasoning_content"), str):
        message["reasoning_content"] = synth_text(message["reasoning_content"])
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        message["tool_calls"] = [
            {
                **call,
                "function": {
                    **call["function"],
                    "arguments": synth_text(call["function"]["arguments"]),
                },
            }
            if isinstance(call, dict)
            and isinstance(call.get("function"), dict)
            and isinstance(call["function"].get("arguments"), str)
            else call
            for call in calls
        ]
    return message


def sanitize_chat_record(record: Record) -> Record:
    """opencode's chat completions: prose rewritten (the JSON punctuation of tool arguments
    stays, so they stay JSON), tool schemas' descriptions too, UUIDs in headers."""
    body = record["body"]
    if isinstance(body, dict):
        body = dict(body)
        if isinstance(body.get("messages"), list):
            body["messages"] = [_chat_message(m) for m in body["messages"]]
        if isinstance(body.get("tools"), list):
            body["tools"] = [synth_schema(tool) for tool in body["tools"]]
    headers = {
        name: synth_uuids(value)
        for name, value in record["headers"].items()
        if name not in record_codex_fixtures.DROPPED_HEADERS
    }
    return {"method": record["method"], "path": record["path"], "headers": headers, "body": body}


SANITIZE = {
    "codex": record_codex_fixtures.sanitize_record,
    "claude-code": record_claude_code_fixtures.sanitize_record,
    "opencode": sanitize_chat_record,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--client", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args()
    for name in args.client or sorted(SCENARIOS):
        client = CLIENTS[name]
        executable = client.install()
        if isinstance(executable, str):
            raise SystemExit(executable)
        with tempfile.TemporaryDirectory(prefix=f"sessions-{name}-") as tmp:
            scratch = Path(tmp)
            report, exchanges = run_scenario(client, executable, scratch)
            raw = scratch / "raw"
            raw.mkdir()
            for n, exchange in enumerate(exchanges, 1):
                path = exchange.path.split("?")[0].strip("/").replace("/", "_")
                file = raw / f"{n:03d}-{exchange.method.lower()}-{path}.json"
                file.write_text(json.dumps(exchange.record()))
            write_fixtures(raw, args.out / name, SANITIZE[name], (str(scratch), API_KEY))
        print(
            f"{name}: {report.turns} turns, {report.requests_sent} requests, "
            f"{report.compactions} compactions, codes {report.codes}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
