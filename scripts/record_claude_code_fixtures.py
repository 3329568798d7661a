"""Re-record tests/fixtures/claude_code/: real Claude Code requests with synthetic prose.

    python -m scripts.record_claude_code_fixtures [--out DIR] [--keep-raw DIR]

Runs the pinned CLI (tests/support/agent_cli.py) headless against the recording server of
scripts/record_agent_requests.py, once per scenario, then rewrites every recorded request.
Prose (system prompt text, tool and schema descriptions, user text, file contents, thinking
text, tool inputs) becomes synthetic text of the same length and shape: each word becomes a
made-up word of the same length and case; digits, punctuation, whitespace and tags such as
<system-reminder> stay. Ids (session, prompt, agent, device, the billing block's fingerprint)
become synthetic ids of the same format. Structure is kept exactly: block types and order,
cache_control, the billing block's format, role "system" messages, tool names and schemas,
top-level fields, and headers (less host and content-length, which describe the recording's
connection; credential headers are recorded with a placeholder value).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
# Words map to synthetic words through a keyed hash: equal text stays equal across requests
# (so shared prefixes stay shared) and the original is not readable.
SALT = b"flashbox-claude-code-fixtures"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TAG = re.compile(r"(</?[A-Za-z][A-Za-z0-9_-]*>)")
WORD = re.compile(r"[A-Za-z]+")
AGENT_ID = re.compile(r"^a[0-9a-f]{16}$")
HEX = "0123456789abcdef"
BILLING_PREFIX = "x-anthropic-billing-header: "
CONSONANTS = "bcdfghjklmnpqrstvwxz"
VOWELS = "aeiou"


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


def _digest(text: str) -> bytes:
    return hashlib.sha256(SALT + text.encode()).digest()


def _stream(text: str, length: int) -> bytes:
    out = b""
    counter = 0
    while len(out) < length:
        out += _digest(f"{counter}:{text}")
        counter += 1
    return out[:length]


def synth_word(word: str) -> str:
    """A synthetic word of the same length and case pattern."""
    letters = [
        (VOWELS[b % len(VOWELS)] if i % 2 else CONSONANTS[b % len(CONSONANTS)])
        for i, b in enumerate(_stream(word, len(word)))
    ]
    cased = (new.upper() if old.isupper() else new for old, new in zip(word, letters, strict=True))
    return "".join(cased)


def synth_text(text: str) -> str:
    """Every word replaced; whitespace, digits, punctuation and tags like <name> kept."""
    parts = TAG.split(text)
    return "".join(
        part if i % 2 else WORD.sub(lambda m: synth_word(m.group()), part)
        for i, part in enumerate(parts)
    )


def synth_id(value: str) -> str:
    """A synthetic id in the same format: hex stays hex, dashes, a UUID's version and variant
    nibbles and an agent id's leading "a" stay."""
    raw = _stream("id:" + value, len(value))
    fixed = {14, 19} if UUID.match(value) else {0} if AGENT_ID.match(value) else set()
    return "".join(
        ch if i in fixed or ch not in HEX else HEX[b % 16]
        for i, (ch, b) in enumerate(zip(value, raw, strict=True))
    )


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


def _synth_schema(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: synth_text(value)
            if key == "description" and isinstance(value, str)
            else _synth_schema(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_synth_schema(item) for item in node]
    return node


def _synth_values(node: Any) -> Any:
    """Tool inputs: keys kept, every string value made synthetic."""
    if isinstance(node, str):
        return synth_text(node)
    if isinstance(node, dict):
        return {key: _synth_values(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_synth_values(item) for item in node]
    return node


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
            block["input"] = _synth_values(block["input"])
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
        tool["input_schema"] = _synth_schema(tool["input_schema"])
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


def _check_no_leaks(text: str, scratch: Path) -> None:
    for needle in (str(scratch), str(Path.home()), API_KEY):
        if needle in text:
            raise SystemExit(f"a fixture still contains {needle!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FIXTURES_DIR)
    parser.add_argument("--keep-raw", type=Path, help="also copy the unsanitized records here")
    args = parser.parse_args()
    claude = install_claude_code()
    if isinstance(claude, str):
        print(claude, file=sys.stderr)
        return 1
    for scenario in SCENARIOS:
        with tempfile.TemporaryDirectory(prefix=f"cc-{scenario.name}-") as tmp:
            scratch = Path(tmp)
            raw = record_scenario(claude, scenario, scratch)
            if args.keep_raw:
                shutil.copytree(raw, args.keep_raw / scenario.name, dirs_exist_ok=True)
            target = args.out / scenario.name
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for path in sorted(raw.glob("*.json")):
                record = sanitize_record(json.loads(path.read_text()))
                text = json.dumps(record, indent=1, ensure_ascii=False) + "\n"
                _check_no_leaks(text, scratch)
                (target / path.name).write_text(text)
                print(f"  {target.name}/{path.name}: {record['method']} {record['path']}")
    print(f"Claude Code {CLAUDE_CODE_VERSION}: fixtures in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
