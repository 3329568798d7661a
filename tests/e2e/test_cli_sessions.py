"""Long sessions of the real Claude Code, Codex and opencode through the gateway (`make
test-cli`, which CI runs; skipped without npm). The fast suite replays what they sent
(tests/e2e/test_session_replay.py).

Each CLI runs its scenario (tests/support/cli_sessions.py) over the scripted simulator: turn
after turn continued by its own resume flag, the first turn reading a file and starting two
subagents at once, the context small enough that the client compacts by itself. Asserted: every
turn's CLI run succeeds, every request it sent was answered 2xx (a recording proxy in front of
the gateway keeps the error of any that was not), it compacted, and routing kept every
conversation on its checkpoint (the gateway's flashbox_affinity_total).
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from scripts.record_session_shape import API_KEY, CLIENTS, Session
from tests.support import agent_cli, codex_cli, opencode_cli
from tests.support.cli_sessions import (
    SCENARIOS,
    Stack,
    cli_stack,
    prepare,
    run_scenario,
    run_sessions,
    scripted_stack,
)
from tests.support.metrics import affinity_outcomes
from tests.support.npm_cli import INSTALL_TIMEOUT_S, run_cli
from tests.support.procs import REPO_ROOT

# The first use installs each CLI (an npm download each).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(INSTALL_TIMEOUT_S + 600)]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_long_session_compacts_resumes_and_keeps_its_checkpoints(
    name: str, tmp_path: Path
) -> None:
    client = CLIENTS[name]
    executable = client.install()
    if isinstance(executable, str):
        pytest.skip(executable)
    report, _ = run_scenario(client, executable, tmp_path)
    assert report.turns == sum(len(s.prompts) for s in SCENARIOS[name])
    assert report.failed == []
    # 499: the client hung up on a stream it no longer wanted (Codex closes finished agents).
    assert set(report.refused) <= {"499"}, report.codes
    assert report.compactions >= 1
    assert report.outcome("verified_miss") == 0, (report.affinity, report.log)
    assert report.outcome("head_miss") == 0, report.affinity
    assert report.outcome("hit", "main") >= 5, report.affinity
    assert report.outcome("new", "subagent") == 2, report.affinity
    assert report.outcome("new", "main") + report.outcome("restarted", "main") >= 2
    print(
        f"{name}: {report.turns} turns, {report.requests_sent} requests, "
        f"{report.compactions} compactions, outcomes "
        f"{ {f'{o}/{k}': int(n) for (o, k), n in report.affinity.items() if n} }"
    )


# -- Claude Code's tool search behind the gateway ----------------------------------------------

SEARCH_PROMPT = "Use the catalog to find open"
TOPICS = ("invoices.", "tickets.", "alerts.", "builds.")
LOOKUP = "mcp__catalog__lookup_042"
TOOL_SEARCH_SCRIPT = {
    "max_calls": 40,
    "rules": [
        {
            "when": SEARCH_PROMPT,
            "steps": [
                [{"name": "ToolSearch", "arguments": {"query": f"select:{LOOKUP}"}}],
                [{"name": LOOKUP, "arguments": {"query": "open invoices"}}],
            ],
            "final": "Looked it up.",
        },
        {"when_no_tools": True, "final": "Catalog lookup"},
        {"final": "Nothing to do."},
    ],
}


def _claude_search_run(
    claude: Path, stack: Stack, home: Path, work: Path, mcp: Path, search: bool, topic: str
) -> dict[str, Any]:
    env = agent_cli.headless_env(
        home, stack.url, API_KEY, hint_headers=True,
        extra={"ENABLE_TOOL_SEARCH": "true" if search else "false"},
    )  # fmt: skip
    argv = agent_cli.headless_argv(
        claude,
        f"{SEARCH_PROMPT} {topic}",
        max_turns=6,
        extra_args=["--mcp-config", str(mcp), "--strict-mcp-config", "--allowedTools", LOOKUP],
    )
    returncode, stdout, stderr = run_cli(argv, env=env, cwd=work, timeout=300)
    assert returncode == 0, (stdout[-2000:], stderr[-2000:])
    result = json.loads(stdout)
    assert result["result"] == "Looked it up." if search else not result["is_error"], result
    return dict(result)


def test_claude_code_tool_search_keeps_deferred_tools_out_of_the_prompt(tmp_path: Path) -> None:
    """ENABLE_TOOL_SEARCH=true against a local MCP server with 100 tools: the model finds a
    tool with ToolSearch, Claude Code sends it (deferred) with a tool_reference result, and the
    model calls it. The prompt carries only what was referenced (its count, by the gateway's
    own count_tokens, is a fraction of the prompt with every tool), and later sessions with the
    same head start from the head's checkpoint."""
    claude = agent_cli.claude_code_or_skip()
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    mcp = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": ["-m", "tests.support.mcp_catalog"]}
    server["env"] = {"PYTHONPATH": str(REPO_ROOT)}  # type: ignore[assignment]
    mcp.write_text(json.dumps({"mcpServers": {"catalog": server}}))
    with scripted_stack(TOOL_SEARCH_SCRIPT) as stack:
        # Three sessions, same project: the gateway checkpoints a head once a second session
        # shares it (gateway.core.heads), and the third starts from that checkpoint.
        for topic in TOPICS[:3]:
            _claude_search_run(claude, stack, home, work, mcp, search=True, topic=topic)
        searched = [e for e in stack.proxy.exchanges if e.path.startswith("/v1/messages?")]
        _claude_search_run(
            claude, stack, tmp_path / "home-all", work, mcp, search=False, topic=TOPICS[3]
        )
        everything = [e for e in stack.proxy.exchanges if e.path.startswith("/v1/messages?")]
        everything = everything[len(searched) :]
        assert stack.proxy.failed() == []
        outcomes = {k: v for k, v in affinity_outcomes(stack.gateway.url).items() if v}
        sent = [e.body for e in searched if isinstance(e.body, dict) and e.body.get("tools")]
        first = sent[0]
        names = [t["name"] for t in first["tools"]]
        assert "ToolSearch" in names
        assert not [n for n in names if n.startswith("mcp__")]  # deferred: none sent yet
        referenced = [t for body in sent for t in body["tools"] if t["name"] == LOOKUP]
        assert referenced
        assert all(t.get("defer_loading") is True for t in referenced)
        results = [
            block
            for body in sent
            for block in body["messages"][-1]["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        assert any(
            part.get("type") == "tool_reference" and part.get("tool_name") == LOOKUP
            for block in results
            for part in block["content"]
            if isinstance(part, dict)
        )
        assert any("lookup_042: " in json.dumps(block["content"]) for block in results)
        with_search = _count(stack, first)
        all_tools = next(e.body for e in everything if isinstance(e.body, dict))
        assert len([t for t in all_tools["tools"] if t["name"].startswith("mcp__")]) == 100
        without_search = _count(stack, all_tools)
        assert with_search * 2 < without_search, (with_search, without_search)
    # A later session's first request found the head checkpoint the earlier ones left.
    assert outcomes.get(("head_hit", "main"), 0) >= 1, outcomes
    assert outcomes.get(("verified_miss", "main"), 0) == 0, outcomes
    print(f"tool search: prompt {with_search} tokens, {without_search} with every tool; {outcomes}")


def _count(stack: Stack, body: dict[str, Any]) -> int:
    keep = ("model", "messages", "system", "tools", "thinking", "tool_choice")
    request = {k: v for k, v in body.items() if k in keep}
    response = httpx.post(
        stack.gateway.url + "/v1/messages/count_tokens",
        json=request,
        headers={"x-api-key": API_KEY},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return int(response.json()["input_tokens"])


# -- an image pasted into a Claude Code turn -----------------------------------------------


def test_claude_code_turns_with_a_pasted_image_keep_their_checkpoint(tmp_path: Path) -> None:
    """A headless turn that pastes an image (stream-json input, as the SDKs send it), then two
    more turns of the same session: the image reaches the engine, every request is a 2xx,
    and the later turns are verified hits (the image stays where it was in the prompt)."""
    claude = agent_cli.claude_code_or_skip()
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    image = base64.b64encode(_png(64, 48)).decode()
    script = {"max_calls": 0, "rules": [{"final": "A red rectangle."}]}
    with scripted_stack(script) as stack:
        env = agent_cli.headless_env(home, stack.url, API_KEY, hint_headers=True)
        session = None
        prompts: list[list[dict[str, Any]]] = [
            [
                {"type": "text", "text": "What is in this picture?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": image},
                },
            ],
            [{"type": "text", "text": "And its colour?"}],
            [{"type": "text", "text": "Thanks."}],
        ]
        for content in prompts:
            line = {"type": "user", "message": {"role": "user", "content": content}}
            argv = [
                str(claude), "-p", "--input-format", "stream-json", "--output-format",
                "stream-json", "--verbose", "--permission-mode", "dontAsk", "--max-turns", "2",
                *(["--resume", session] if session else []),
            ]  # fmt: skip
            done = subprocess.run(
                argv, input=json.dumps(line) + "\n", env=env, cwd=work, capture_output=True,
                text=True, timeout=180, check=False,
            )  # fmt: skip
            events = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
            results = [e for e in events if e.get("type") == "result"]
            assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
            assert results, done.stdout[-2000:]
            assert results[-1]["result"] == "A red rectangle."
            session = results[-1]["session_id"]
        assert stack.proxy.failed() == []
        turns = [
            e.body
            for e in stack.proxy.exchanges
            if e.path.startswith("/v1/messages?")
            and isinstance(e.body, dict)
            and e.body.get("tools")
        ]
        images_sent = [json.dumps(body["messages"]).count('"type": "image"') for body in turns]
        assert images_sent[0] == 1
        assert all(n == 1 for n in images_sent)  # the image stays in the history
        outcomes = {k: v for k, v in affinity_outcomes(stack.gateway.url).items() if v}
        image_count = sum(v for labels, v in stack.samples("flashbox_media_images_total"))
    assert image_count >= len(turns)
    assert outcomes.get(("verified_miss", "main"), 0) == 0, outcomes
    assert outcomes.get(("hit", "main"), 0) >= 2, outcomes


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


# -- Codex's custom apply_patch tool through the gateway ---------------------------------------

PATCH = "*** Begin Patch\n*** Add File: made.txt\n+hello from the gateway\n*** End Patch\n"


def test_codex_apply_patch_round_trips_through_the_gateway(tmp_path: Path) -> None:
    """With a model catalog entry Codex offers apply_patch as a freeform custom tool (a Lark
    grammar): the model's call comes back as a custom_tool_call, Codex applies the patch in its
    workspace-write sandbox, and the next request carries the custom_tool_call_output."""
    codex = codex_cli.codex_or_skip()
    work = tmp_path / "work"
    work.mkdir()
    script = {
        "max_calls": 4,
        "rules": [
            {
                "when": "Add the file",
                "steps": [[{"name": "apply_patch", "arguments": {"input": PATCH}}]],
                "final": "Patched.",
            },
            {"final": "Nothing to do."},
        ],
    }
    with scripted_stack(script) as stack:
        top = codex_cli.write_model_catalog(tmp_path / "catalog.json")
        env = codex_cli.codex_env(tmp_path / "home", f"{stack.url}/v1", API_KEY, top_level=top)
        run = codex_cli.run_codex(
            codex, "Add the file made.txt.", env=env, cwd=work, sandbox="workspace-write"
        )
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
        assert run.final_message == "Patched."
        assert stack.proxy.failed() == []
        bodies = [e.body for e in stack.proxy.exchanges if isinstance(e.body, dict)]
    assert (work / "made.txt").read_text() == "hello from the gateway\n"
    outputs = [i for i in bodies[-1]["input"] if i.get("type") == "custom_tool_call_output"]
    calls = [i for i in bodies[-1]["input"] if i.get("type") == "custom_tool_call"]
    assert [c["input"] for c in calls] == [PATCH]
    assert [o["call_id"] for o in outputs] == [c["call_id"] for c in calls]


@pytest.mark.parametrize("limit", [14000, 17000])
def test_codex_compacts_at_other_limits_and_keeps_going(limit: int, tmp_path: Path) -> None:
    """Codex's history after a compaction depends on where in a turn it compacted (between
    tool rounds, or before a new prompt): more limits, more shapes; each must be served."""
    client = CLIENTS["codex"]
    executable = client.install()
    if isinstance(executable, str):
        pytest.skip(executable)
    (scenario,) = SCENARIOS["codex"]
    session = Session(scenario.prompts, {"model_auto_compact_token_limit": limit})
    work, home = tmp_path / "work", tmp_path / "home"
    prepare(work)
    with cli_stack(client, work) as stack:
        report = run_sessions(client, executable, stack, home, work, [session])
    assert report.failed == []
    assert set(report.refused) <= {"499"}, report.codes
    assert report.compactions >= 1
    assert report.outcome("verified_miss") == 0, (report.affinity, report.log)


# -- --continue: the latest session of the folder, without naming it --------------------------


def test_claude_code_and_opencode_continue_land_on_their_checkpoint(tmp_path: Path) -> None:
    """`claude -p --continue` and `opencode run --continue` pick up the folder's latest
    session without its id: the next turn carries the whole conversation, under the same
    session, and is a verified hit."""
    script = {"max_calls": 0, "rules": [{"final": "Noted."}]}
    claude = agent_cli.install_claude_code()
    opencode = opencode_cli.install_opencode()
    if isinstance(claude, str) or isinstance(opencode, str):
        pytest.skip(claude if isinstance(claude, str) else str(opencode))
    with scripted_stack(script) as stack:
        work = tmp_path / "claude-work"
        work.mkdir()
        env = agent_cli.headless_env(tmp_path / "claude-home", stack.url, API_KEY)
        for extra in ([], ["--continue"]):
            argv = [str(claude), "-p", "Remember the number 7.", "--output-format", "json"]
            argv += ["--permission-mode", "dontAsk", "--max-turns", "2", *extra]
            returncode, stdout, stderr = run_cli(argv, env=env, cwd=work, timeout=180)
            assert returncode == 0, (stdout[-2000:], stderr[-2000:])
        work = tmp_path / "opencode-work"
        work.mkdir()
        oc_env = opencode_cli.opencode_env(tmp_path / "oc-home", f"{stack.url}/v1", API_KEY)
        for extra in ([], ["--continue"]):
            run = opencode_cli.run_opencode(
                opencode, "Remember the number 7.", env=oc_env, cwd=work, extra_args=extra
            )
            assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
        assert stack.proxy.failed() == []
        outcomes = {k: v for k, v in affinity_outcomes(stack.gateway.url).items() if v}
        tooled = [
            e for e in stack.proxy.exchanges if isinstance(e.body, dict) and e.body.get("tools")
        ]
        claude_turns = [e for e in tooled if e.path.startswith("/v1/messages?")]
        chat_turns = [e for e in tooled if e.path == "/v1/chat/completions"]
    for turns, header in ((claude_turns, "x-claude-code-session-id"), (chat_turns, "x-session-id")):
        first, last = turns[0], turns[-1]
        assert last.headers.get(header) == first.headers.get(header)  # the same session
        assert len(last.body["messages"]) > len(first.body["messages"])  # the history came back
    assert outcomes.get(("verified_miss", "main"), 0) == 0, outcomes
    assert outcomes.get(("hit", "main"), 0) >= 2, outcomes
