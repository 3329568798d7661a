"""Record the request shape of real agent-CLI sessions into bench/shapes/<client>.json.

    python -m scripts.record_session_shape --client claude-code|codex|opencode \
        [--out bench/shapes/<client>.json] [--pause S] [--keep-raw DIR]

Runs the pinned CLI headless (tests/support/agent_cli.py, codex_cli.py, opencode_cli.py: a
throwaway HOME, the offline settings) against the recorder of scripts/record_agent_requests.py,
whose script (scripts/script_answers.py) drives it into tool calls, two parallel subagents and
several turns. A session is several CLI runs that continue one conversation (`claude -p
--resume`, `codex exec resume`, `opencode run --session`), `--pause` seconds apart, as a person
who reads the answer before typing the next prompt; the second session of each client runs with
a small context window so that the client compacts by itself. All sessions share one HOME and
one working folder, as one person's sessions on one project do. Every request is recorded with
its arrival time and headers, turned into the shape (scripts/session_shape.py), checked
(scripts/session_shape_format.py) and written; no text, path or real id is written.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.core.reasoning_codec import ReasoningCodec
from gateway.settings import Settings
from scripts import session_shape
from scripts.record_agent_requests import serving
from scripts.script_answers import Call, Script
from scripts.session_shape import FORMAT, Parsed, Pseudonyms, bundled_renderer, parse_record
from scripts.session_shape_format import check_shape
from tests.support import agent_cli, codex_cli, opencode_cli
from tests.support.npm_cli import run_cli
from tests.support.procs import REPO_ROOT

SHAPES_DIR = REPO_ROOT / "bench" / "shapes"
API_KEY = "flashbox-recording-key-0000"
FILES = {
    # Large enough (about 3,500 and 1,200 tokens) that the conversation, not the head, grows
    # the prompt, so that after a compaction the restart is well below the threshold.
    "notes.txt": "".join(f"Line {n}: the build passes on the second try.\n" for n in range(300)),
    "todo.txt": "".join(f"- item {n}: check the cache folder first.\n" for n in range(100)),
}
# The prompts; the script gives each its own plan (Script.by_prompt keys on them).
SURVEY = "Read notes.txt, then have two agents look at the folder."
LIST = "Now list the text files."
AGAIN = "Read the notes once more."
AGENT_NOTES = "Summarise notes.txt in one line."
AGENT_TODO = "Check todo.txt and report the open items."
TURN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Session:
    """One recorded session: its prompts in order, and the client settings it runs with."""

    prompts: Sequence[str]
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tools:
    """A client's tool calls for the plans: read a file, start an agent, list the folder."""

    read: Callable[[str], Call]
    agent: Callable[[str, str], Call]
    listing: Call


def plans(
    tools: Tools, compaction: Callable[[Mapping[str, str], Mapping[str, Any]], bool]
) -> Script:
    survey = [
        [tools.read("notes.txt")],
        [tools.agent("Summarise notes", AGENT_NOTES), tools.agent("Check todo", AGENT_TODO)],
        [tools.listing],
    ]
    return Script(
        steps=[[tools.read("notes.txt")]],
        by_prompt={
            SURVEY: survey,
            LIST: [[tools.listing]],
            AGAIN: [[tools.read("notes.txt")]],
            AGENT_NOTES: [[tools.read("notes.txt")]],
            AGENT_TODO: [[tools.read("todo.txt")]],
        },
        compaction=compaction,
    )


class Failed(SystemExit):
    pass


def _fail(what: str, returncode: int | None, stdout: str, stderr: str) -> Failed:
    return Failed(f"{what}: exit {returncode}\n{stdout[-2000:]}\n{stderr[-2000:]}")


# Claude Code: `-p` turns continued with --resume (session persistence on), hint headers on.
def _claude_env(home: Path, url: str, session: Session) -> dict[str, str]:
    extra = {key: str(value) for key, value in session.settings.items()}
    return agent_cli.headless_env(home, url, API_KEY, hint_headers=True, extra=extra)


def _claude_turn(
    claude: Path, env: Mapping[str, str], work: Path, prompt: str, session: str | None
) -> str:
    argv = [str(claude), "-p", prompt, "--output-format", "json"]
    argv += ["--permission-mode", "dontAsk", "--max-turns", "12"]
    argv += ["--resume", session] if session else []
    returncode, stdout, stderr = run_cli(argv, env=env, cwd=work, timeout=TURN_TIMEOUT_S)
    try:
        result = json.loads(stdout)
    except ValueError:
        result = {}
    if returncode != 0 or result.get("is_error") or not result.get("session_id"):
        raise _fail(f"claude -p {prompt!r}", returncode, stdout, stderr)
    return str(result["session_id"])


def _claude_tools(work: Path) -> Tools:
    def agent(description: str, prompt: str) -> Call:
        spec = {"description": description, "prompt": prompt, "subagent_type": "Explore"}
        return Call("Agent", {**spec, "run_in_background": False})

    return Tools(
        read=lambda name: Call("Read", {"file_path": str(work / name)}),
        agent=agent,
        # dontAsk denies Bash: the turn carries an error result, as a denied call does.
        listing=Call("Bash", {"command": "ls *.txt", "description": "List the text files"}),
    )


def _claude_compaction(headers: Mapping[str, str], body: Mapping[str, Any]) -> bool:
    return (
        headers.get("x-claude-code-request-class") == "compaction"
        or "x-claude-code-compaction" in headers
    )


# Codex: `codex exec` turns continued with `codex exec resume` (not ephemeral).
def _codex_env(home: Path, url: str, session: Session) -> dict[str, str]:
    top = {key: value for key, value in session.settings.items()}
    return codex_cli.codex_env(home, f"{url}/v1", API_KEY, top_level=top)


def _codex_turn(
    codex: Path, env: Mapping[str, str], work: Path, prompt: str, session: str | None
) -> str:
    argv = [str(codex), "exec", "--json", "--skip-git-repo-check", "--sandbox", "read-only"]
    argv += ["--strict-config", *(["resume", session, prompt] if session else ["--", prompt])]
    returncode, stdout, stderr = run_cli(argv, env=env, cwd=work, timeout=TURN_TIMEOUT_S)
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    started = [e["thread_id"] for e in events if e.get("type") == "thread.started"]
    if returncode != 0 or not started:
        raise _fail(f"codex exec {prompt!r}", returncode, stdout, stderr)
    return str(started[0])


def _codex_tools(work: Path) -> Tools:
    return Tools(
        read=lambda name: Call("exec_command", {"cmd": f"cat {name}"}),
        agent=lambda _, prompt: Call("spawn_agent", {"message": prompt}, "multi_agent_v1"),
        listing=Call("exec_command", {"cmd": "ls"}),
    )


def _codex_compaction(headers: Mapping[str, str], body: Mapping[str, Any]) -> bool:
    return '"request_kind":"compaction"' in headers.get("x-codex-turn-metadata", "")


# opencode: `opencode run` turns continued with --session.
def _opencode_env(home: Path, url: str, session: Session) -> dict[str, str]:
    context = int(session.settings.get("context_tokens", 131072))
    config = opencode_cli.opencode_config(f"{url}/v1", API_KEY, context_tokens=context)
    return opencode_cli.opencode_env(home, f"{url}/v1", API_KEY, config=config)


def _opencode_turn(
    opencode: Path, env: Mapping[str, str], work: Path, prompt: str, session: str | None
) -> str:
    run = opencode_cli.run_opencode(
        opencode, prompt, env=env, cwd=work, session=session, timeout=TURN_TIMEOUT_S
    )
    if run.returncode != 0 or run.session_id is None:
        raise _fail(f"opencode run {prompt!r}", run.returncode, run.stdout, run.stderr)
    return run.session_id


def _opencode_tools(work: Path) -> Tools:
    def agent(description: str, prompt: str) -> Call:
        kind = "explore" if prompt == AGENT_NOTES else "general"
        return Call("task", {"description": description, "prompt": prompt, "subagent_type": kind})

    return Tools(
        read=lambda name: Call("read", {"filePath": str(work / name)}),
        agent=agent,
        listing=Call("read", {"filePath": str(work)}),  # read lists a folder
    )


def _opencode_compaction(headers: Mapping[str, str], body: Mapping[str, Any]) -> bool:
    system = json.dumps(body.get("messages", [])[:1])
    return not body.get("tools") and "summar" in system.lower()


@dataclass(frozen=True)
class Client:
    name: str
    api: str
    version: str
    install: Callable[[], Path | str]
    tools: Callable[[Path], Tools]
    compaction: Callable[[Mapping[str, str], Mapping[str, Any]], bool]
    env: Callable[[Path, str, Session], dict[str, str]]
    turn: Callable[[Path, Mapping[str, str], Path, str, str | None], str]
    sessions: Sequence[Session]
    how: str  # what the runs were, for the notes


TURNS = (SURVEY, LIST, AGAIN)
CLIENTS = {
    "claude-code": Client(
        "claude-code",
        "anthropic",
        agent_cli.CLAUDE_CODE_VERSION,
        agent_cli.install_claude_code,
        _claude_tools,
        _claude_compaction,
        _claude_env,
        _claude_turn,
        (
            Session((SURVEY, LIST, "/compact", AGAIN)),
            Session(
                (*TURNS, AGAIN, AGAIN),
                {"CLAUDE_CODE_MAX_CONTEXT_TOKENS": 40000, "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": 62},
            ),
        ),
        "claude -p turns continued with --resume, --permission-mode dontAsk (Bash denied), "
        "gateway hint headers on (CLAUDE_CODE_GATEWAY_HINT_HEADERS=1), "
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS=8192. s1: three prompts and a manual /compact before the "
        "last; s2: five prompts with CLAUDE_CODE_MAX_CONTEXT_TOKENS=40000 and "
        "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=62 so that it compacts by itself. "
        "Subagents: the Agent tool (Explore), two in one turn.",
    ),
    "codex": Client(
        "codex",
        "responses",
        codex_cli.CODEX_VERSION,
        codex_cli.install_codex,
        _codex_tools,
        _codex_compaction,
        _codex_env,
        _codex_turn,
        (Session(TURNS), Session(TURNS, {"model_auto_compact_token_limit": 16000})),
        "codex exec turns continued with codex exec resume, read-only sandbox, no model catalog "
        "(no max_output_tokens is sent: max_tokens 0). s2: model_auto_compact_token_limit=16000 "
        "so that it compacts by itself (a request without tools, answered with a summary, then "
        "a restart). Subagents: spawn_agent of the multi_agent_v1 namespace, two in one turn; "
        "they notify the parent, which goes on. prompt_cache_key equals the session-id header.",
    ),
    "opencode": Client(
        "opencode",
        "openai",
        opencode_cli.OPENCODE_VERSION,
        opencode_cli.install_opencode,
        _opencode_tools,
        _opencode_compaction,
        _opencode_env,
        _opencode_turn,
        (Session(TURNS), Session(TURNS, {"context_tokens": 21000})),
        "opencode run turns continued with --session, one OpenAI-compatible provider for the "
        "agents and the title (small_model). s2: the model's limit.context is 21000 so that it "
        "compacts by itself. Subagents: the task tool (explore and general), two in one turn, "
        "each a child session (x-parent-session-id).",
    ),
}


def record(client: Client, executable: Path, pause: float, keep_raw: Path | None) -> list[Any]:
    """Run the client's sessions against one recorder; returns the raw records."""
    with tempfile.TemporaryDirectory(prefix="session-shape-") as tmp:
        work, home, raw = Path(tmp) / "work", Path(tmp) / "home", Path(tmp) / "raw"
        work.mkdir()
        for name, text in FILES.items():
            (work / name).write_text(text)
        script = plans(client.tools(work), client.compaction)
        with serving(raw, {"name": "unused", "input": {}}, script) as server:
            for number, session in enumerate(client.sessions, 1):
                env = client.env(home, server.url, session)
                session_id = None
                for turn, prompt in enumerate(session.prompts):
                    if turn:
                        time.sleep(pause)
                    session_id = client.turn(executable, env, work, prompt, session_id)
                    print(f"s{number} turn {turn + 1}: {prompt!r} done", flush=True)
        if keep_raw is not None:
            shutil.copytree(raw, keep_raw, dirs_exist_ok=True)
        records = [json.loads(path.read_text()) for path in sorted(raw.glob("*.json"))]
        for record in records:
            record["scratch"] = tmp  # for the leak check; never written
        return records


def shape_document(client: Client, records: Sequence[Any], pause: float) -> dict[str, Any]:
    renderer = bundled_renderer()
    codec = ReasoningCodec.with_random_key(max_age_s=1e9, max_text_bytes=1 << 26)
    settings = Settings()
    parsed: list[Parsed] = []
    for record in records:
        found = parse_record(record, renderer, codec, settings)
        if found is not None:
            parsed.append(found)
    by_session: dict[str, list[Parsed]] = {}
    for request in sorted(parsed, key=lambda r: r.received_at):
        by_session.setdefault(request.session_key, []).append(request)
    ids, heads = Pseudonyms(), dict[str, str]()
    sessions = [
        {"id": f"s{n}", "requests": session_shape.shape_session(group, ids, heads)}
        for n, group in enumerate(by_session.values(), 1)
    ]
    derivation = (session_shape.__doc__ or "").split("How each field is derived", 1)[-1]
    notes = (
        f"Recorded by scripts/record_session_shape.py: {client.how} The recorder answers at "
        f"once, so at_s holds the client's own pace plus a {pause:g} s pause before each "
        "next prompt. Tool calls follow scripts/script_answers.py. Derived"
        + " ".join(derivation.split())
    )
    return {
        "format": FORMAT,
        "client": client.name,
        "client_version": client.version,
        "api": client.api,
        "notes": notes,
        "sessions": sessions,
    }


def leaks(text: str, records: Sequence[Any]) -> list[str]:
    """Real values that must not reach the file: paths, the key, every real id sent."""
    needles = {API_KEY, "/tmp/", str(Path.home()) + "/"}
    for record in records:
        needles.add(record["scratch"])
        for name in session_shape.ROUTING_HEADERS:
            needles.update(session_shape.ids_in(record["headers"].get(name, "")))
    return sorted(needle for needle in needles if needle in text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--client", choices=sorted(CLIENTS), required=True)
    parser.add_argument("--out", type=Path, help="default: bench/shapes/<client>.json")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds before each next prompt")
    parser.add_argument("--keep-raw", type=Path, help="also copy the raw records (with text) here")
    args = parser.parse_args(argv)
    client = CLIENTS[args.client]
    executable = client.install()
    if isinstance(executable, str):
        print(executable, file=sys.stderr)
        return 1
    records = record(client, executable, args.pause, args.keep_raw)
    document = shape_document(client, records, args.pause)
    text = json.dumps(document, indent=1) + "\n"
    problems = check_shape(document) + [f"leak: {x!r}" for x in leaks(text, records)]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    out = args.out or SHAPES_DIR / f"{client.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    counts = [len(s["requests"]) for s in document["sessions"]]
    print(f"{out}: {len(counts)} sessions, {sum(counts)} requests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
