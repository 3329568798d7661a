"""The session-shape converter on recorded requests, the scripted answers, the committed shapes."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.core.reasoning_codec import ReasoningCodec
from gateway.settings import Settings
from scripts import messages_answers, session_shape
from scripts.script_answers import Call, Script, ScriptRun
from scripts.session_shape import Parsed, Pseudonyms, bundled_renderer, parse_record
from scripts.session_shape_format import REQUEST_TYPES, check_shape
from tests.support.procs import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures"
SHAPES = REPO_ROOT / "bench" / "shapes"


@pytest.fixture(scope="module")
def parse() -> Any:
    renderer = bundled_renderer()
    codec = ReasoningCodec.with_random_key(max_age_s=60.0, max_text_bytes=1 << 20)
    settings = Settings()

    def parse_all(records: Sequence[dict[str, Any]]) -> list[Parsed]:
        found = []
        for at, record in enumerate(records):
            parsed = parse_record({"received_at": float(at), **record}, renderer, codec, settings)
            assert parsed is not None
            found.append(parsed)
        return found

    return parse_all


def _fixtures(folder: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((FIXTURES / folder).glob("*.json"))]


def _shape(parse: Any, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return session_shape.shape_session(parse(records), Pseudonyms(), {})


def _summary(shape: Sequence[dict[str, Any]]) -> list[tuple[str, str, int | None]]:
    return [(r["kind"], r["lineage"], r["extends"]) for r in shape]


def test_claude_code_subagent_is_its_own_lineage(parse: Any) -> None:
    shape = _shape(parse, _fixtures("claude_code/subagent"))
    assert _summary(shape) == [
        ("main", "main", None),
        ("subagent", "agent:1", None),
        ("main", "main", 0),
    ]
    main, agent, _ = shape
    assert agent["agent_id"] is not None
    assert main["agent_id"] is None
    assert agent["head"] != main["head"]  # its own system prompt and tools
    assert 0 < main["head_tokens"] < main["prompt_tokens"]
    assert agent["headers"]["x-claude-code-request-class"] == "subagent"
    assert main["stream"] is True
    assert main["max_tokens"] == 8192


def test_claude_code_turns_extend_and_heads_match_across_sessions(parse: Any) -> None:
    heads: dict[str, str] = {}
    ids = Pseudonyms()
    first = session_shape.shape_session(parse(_fixtures("claude_code/read")), ids, heads)
    again = session_shape.shape_session(parse(_fixtures("claude_code/read")), ids, heads)
    assert _summary(first) == [("main", "main", None), ("main", "main", 0)]
    assert first[1]["prompt_tokens"] > first[0]["prompt_tokens"]
    assert [r["head"] for r in again] == [r["head"] for r in first]


def test_a_new_root_with_the_main_head_is_a_compaction_restart(parse: Any) -> None:
    first, follow_up = _fixtures("claude_code/read")
    restart = copy.deepcopy(first)
    restart["body"]["messages"][0]["content"][-1]["text"] = "Summary of the work so far."
    restart["headers"]["x-claude-code-context-compacted"] = "auto"
    shape = _shape(parse, [first, follow_up, restart])
    assert _summary(shape)[2] == ("main", "main#2", None)
    assert [r["compacted"] for r in shape] == [False, False, True]
    assert shape[2]["headers"]["x-claude-code-context-compacted"] == "auto"


def test_codex_turn_extends_and_turn_metadata_keeps_no_ids(parse: Any) -> None:
    records = _fixtures("codex/exec")
    shape = _shape(parse, records)
    assert _summary(shape) == [("main", "main", None), ("main", "main", 0)]
    assert shape[0]["max_tokens"] == 0  # Codex sends no max_output_tokens
    headers = shape[0]["headers"]
    assert json.loads(headers["x-codex-turn-metadata"]) == {"request_kind": "turn"}
    real = records[0]["headers"]["session-id"]
    assert real not in json.dumps(shape)
    assert headers["session-id"] == headers["thread-id"]  # equal ids stay equal


def _chat(
    session: str, system: str, tools: bool, *turns: str, parent: str | None = None
) -> dict[str, Any]:
    headers = {"x-session-id": session, "x-session-affinity": session}
    if parent:
        headers["x-parent-session-id"] = parent
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    messages += [{"role": "user", "content": turn} for turn in turns]
    body: dict[str, Any] = {"model": "m", "max_tokens": 8192, "stream": True, "messages": messages}
    if tools:
        body["tools"] = [
            {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
        ]
    return {"method": "POST", "path": "/v1/chat/completions", "headers": headers, "body": body}


def test_opencode_title_is_a_side_lineage_and_a_child_session_a_subagent(parse: Any) -> None:
    root, child = "ses_" + "A" * 26, "ses_" + "B" * 26
    records = [
        _chat(root, "You are a title generator.", False, "Generate a title", "Read notes"),
        _chat(root, "You are opencode.", True, "Read notes"),
        _chat(child, "You are an explorer.", True, "Look around", parent=root),
    ]
    parsed = parse(records)
    assert {p.session_key for p in parsed} == {root}  # the child belongs to its parent
    shape = session_shape.shape_session(parsed, Pseudonyms(), {})
    assert _summary(shape) == [
        ("side", "side:1", None),
        ("main", "main", None),
        ("subagent", "agent:1", None),
    ]
    assert shape[2]["agent_id"] == shape[2]["headers"]["x-session-id"]
    assert root not in json.dumps(shape)
    assert child not in json.dumps(shape)


def _body(*messages: dict[str, Any], tools: Sequence[str] = ("Read", "Agent")) -> dict[str, Any]:
    return {"messages": list(messages), "tools": [{"name": name} for name in tools]}


def test_script_walks_its_steps_per_user_turn() -> None:
    read = Call("Read", {"file_path": "notes.txt"})
    agents = [Call("Agent", {"prompt": "a"}), Call("Agent", {"prompt": "b"})]
    run = ScriptRun(Script(steps=[[read], agents], by_prompt={"again": [[read]]}))
    prompt = {"role": "user", "content": "go"}
    blocks, stop = messages_answers.scripted_blocks(_body(prompt), {}, run)
    assert stop == "tool_use"
    assert [b["name"] for b in blocks[1:]] == ["Read"]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": blocks[1]["id"]}]}
    turn: list[dict[str, Any]] = [prompt, {"role": "assistant", "content": blocks}, result]
    blocks, _ = messages_answers.scripted_blocks(_body(*turn), {}, run)
    assert [b["name"] for b in blocks[1:]] == ["Agent", "Agent"]  # in parallel
    # A subagent has no Agent tool: its second step has nothing it offers, so it answers.
    blocks, stop = messages_answers.scripted_blocks(_body(*turn, tools=("Read",)), {}, run)
    assert stop == "end_turn"
    # A later prompt of the same session starts its own plan.
    again: list[dict[str, Any]] = [
        *turn,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "again"},
    ]
    blocks, _ = messages_answers.scripted_blocks(_body(*again), {}, run)
    assert [b["name"] for b in blocks[1:]] == ["Read"]


def test_script_answers_compaction_with_a_summary_and_spends_a_bounded_budget() -> None:
    read = Call("Read", {"file_path": "notes.txt"})
    run = ScriptRun(Script(steps=[[read]], compaction=lambda h, b: "x-compact" in h, max_calls=1))
    prompt = {"role": "user", "content": "go"}
    blocks, _ = messages_answers.scripted_blocks(_body(prompt), {"x-compact": "1"}, run)
    assert blocks[0]["text"].startswith("<summary>")
    assert messages_answers.scripted_blocks(_body(prompt), {}, run)[1] == "tool_use"
    assert messages_answers.scripted_blocks(_body(prompt), {}, run)[1] == "end_turn"


COMMITTED = sorted(SHAPES.glob("*.json"))


def test_shapes_are_committed_for_the_three_clients() -> None:
    assert {p.stem for p in COMMITTED} >= {"claude-code", "codex", "opencode"}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_committed_shape_is_well_formed_and_holds_no_text(path: Path) -> None:
    text = path.read_text()
    document = json.loads(text)
    assert check_shape(document) == []
    assert document["client"] == path.stem
    requests = [r for s in document["sessions"] for r in s["requests"]]
    assert all(set(r) == set(REQUEST_TYPES) for r in requests)
    assert {r["kind"] for r in requests} >= {"main", "subagent"}
    for needle in ("/tmp/", "/work/", "/root/", "/home/", "flashbox-recording-key"):
        assert needle not in text
    # Ids are stand-ins: every UUID is one of ours (numbered, version 4, all zeros around).
    for found in re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text):
        assert re.fullmatch(r"[0-9a-f]{8}-0000-4000-8000-[0-9a-f]{12}", found), found
    for request in requests:
        assert all(len(value) <= 80 for value in request["headers"].values())
