"""What the shape replay sends (bench.replay_wire, bench.replay): equal head ids give
byte-identical heads in every session and API; a turn sends its parent's body, the answer and
new text; copies keep their own identities; the accounting of heads and side requests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest

from bench import replay as replay_module
from bench.client import StreamRecord
from bench.replay import (
    PlannedSession,
    ReplayConfig,
    RequestResult,
    cache_key,
    mark_heads,
    plan,
    request_headers,
)
from bench.replay_report import markdown, summarize_replay
from bench.replay_text import build_head, new_text
from bench.replay_wire import AnthropicWire, ChatWire, ResponsesWire, Wire
from bench.shape_synth import SyntheticParams, generate
from bench.shapes import Api, HeadInfo, Shape, ShapeRequest, ShapeSession

MODEL = "glm-5.3-flash"
WIRES: list[Wire] = [
    AnthropicWire(MODEL, steer=True),
    ResponsesWire(MODEL, steer=True),
    ChatWire(MODEL, steer=True, tools_in_system=False),
    ChatWire(MODEL, steer=True, tools_in_system=True),
]


def _request(**changes: Any) -> ShapeRequest:
    fields: dict[str, Any] = {
        "at_s": 0.0,
        "lineage": "main",
        "kind": "main",
        "agent_id": None,
        "head": "project:0",
        "head_tokens": 2000,
        "prompt_tokens": 2500,
        "extends": None,
        "output_tokens": 100,
        "tool_calls": 2,
        "max_tokens": 32000,
        "stream": True,
        "compacted": False,
        "headers": {"x-claude-code-session-id": "s-1"},
    }
    fields.update(changes)
    return ShapeRequest(**fields)


def _head(head_id: str = "project:0", tokens: int = 2000, tools: bool = True) -> Any:
    return build_head(head_id, HeadInfo(tokens, tools), chars_per_token=4.0)


def _head_part(wire: Wire, body: dict[str, Any]) -> str:
    """The part of a body that is the head (what must be byte-identical across sessions)."""
    if isinstance(wire, AnthropicWire):
        return json.dumps([body["system"], body.get("tools")])
    if isinstance(wire, ResponsesWire):
        return json.dumps([body["instructions"], body.get("tools")])
    return json.dumps([body["messages"][0], body.get("tools")])


def _answer(wire: Wire) -> StreamRecord:
    """An answer with reasoning, text and two tool calls, as each recorder keeps it."""
    record = StreamRecord(ok=True, prompt_tokens=2600, completion_tokens=90, cached_tokens=0)
    record.content = ["Looking."]
    record.reasoning = ["first consider"]
    for i, call_id in enumerate(("call_a", "call_b")):
        record.tool_calls[i] = {
            "id": call_id,
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{i}"})},
        }
    if isinstance(wire, AnthropicWire):
        record.answer = [
            {"type": "thinking", "thinking": "first consider", "signature": "fbx1.sig"},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "call_a", "name": "read_file", "input": {"path": "f0"}},
            {"type": "tool_use", "id": "call_b", "name": "read_file", "input": {"path": "f1"}},
        ]
    elif isinstance(wire, ResponsesWire):
        record.answer = [
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "fbx1.x", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text"}]},
            {"type": "function_call", "call_id": "call_a", "name": "read_file", "arguments": "{}"},
            {"type": "function_call", "call_id": "call_b", "name": "read_file", "arguments": "{}"},
        ]
    return record


def test_equal_head_ids_build_identical_heads_of_the_advertised_size() -> None:
    assert _head() == _head()
    assert _head().system != _head("project:1").system
    head = _head(tokens=30_000)
    size = len(head.system) + sum(
        len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in head.tools
    )
    assert abs(size - 30_000 * 4) < 30_000 * 4 * 0.01
    assert head.tools
    assert not _head("side:title", 600, tools=False).tools


@pytest.mark.parametrize("wire", WIRES, ids=lambda w: f"{w.api}-{w.path}-{id(w) % 7}")
def test_equal_head_ids_give_byte_identical_heads_across_sessions(wire: Wire) -> None:
    head, req = _head(), _request()
    one = wire.root(head, req, new_text(500, "s-1", 0, 4.0), "s-1")
    other = wire.root(_head(), req, new_text(500, "s-2", 0, 4.0), "s-2")
    assert _head_part(wire, one) == _head_part(wire, other)
    assert json.dumps(one) != json.dumps(other)  # the sessions' own text differs
    another = wire.root(_head("project:1"), req, new_text(500, "s-1", 0, 4.0), "s-1")
    assert _head_part(wire, one) != _head_part(wire, another)


def test_chat_only_puts_the_tools_into_the_system_text() -> None:
    chat = ChatWire(MODEL, steer=False, tools_in_system=True).root(_head(), _request(), "hi", "k")
    plain = ChatWire(MODEL, steer=False, tools_in_system=False).root(_head(), _request(), "hi", "k")
    assert "tools" not in chat
    assert "custom_params" not in chat
    assert '"name": "read_file"' in chat["messages"][0]["content"]
    assert plain["tools"]
    # About the same size: the same token shape for routers that only speak chat.
    assert abs(len(json.dumps(chat)) - len(json.dumps(plain))) < 0.05 * len(json.dumps(plain))


@pytest.mark.parametrize("wire", WIRES[:3], ids=["anthropic", "responses", "chat"])
def test_a_turn_sends_its_parent_then_the_answer_then_tool_results(wire: Wire) -> None:
    head = _head()
    parent = wire.root(head, _request(), new_text(500, "s-1", 0, 4.0), "s-1")
    answer = _answer(wire)
    text = new_text(800, "s-1", 2, 4.0)
    child = wire.extend(parent, answer, head, _request(extends=0, tool_calls=0), text)
    key = "input" if isinstance(wire, ResponsesWire) else "messages"
    sent, before = child[key], parent[key]
    assert json.dumps(sent[: len(before)]) == json.dumps(before)  # byte for byte
    rest = sent[len(before) :]
    if isinstance(wire, AnthropicWire):
        assert rest[0] == {"role": "assistant", "content": answer.answer}
        results = rest[1]["content"]
        assert [r["tool_use_id"] for r in results] == ["call_a", "call_b"]
        joined = "".join(r["content"] for r in results)
    elif isinstance(wire, ResponsesWire):
        assert rest[:4] == answer.answer
        assert [r["call_id"] for r in rest[4:]] == ["call_a", "call_b"]
        joined = "".join(r["output"] for r in rest[4:])
    else:
        assert rest[0]["tool_calls"] == [answer.tool_calls[0], answer.tool_calls[1]]
        assert rest[0]["reasoning_content"] == "first consider"
        assert [r["tool_call_id"] for r in rest[1:]] == ["call_a", "call_b"]
        joined = "".join(r["content"] for r in rest[1:])
    assert joined == text  # the new text, split among the tool results
    # The head stays, and the request's own settings follow the new turn.
    assert _head_part(wire, child) == _head_part(wire, parent)
    assert child["custom_params"]["sim"]["tool_calls"] == 0


def test_a_turn_without_tool_calls_is_followed_by_a_user_message() -> None:
    wire = AnthropicWire(MODEL, steer=True)
    parent = wire.root(_head(), _request(), "first", "k")
    answer = StreamRecord(ok=True, answer=[{"type": "text", "text": "Done."}])
    child = wire.extend(parent, answer, _head(), _request(extends=0), "next")
    assert child["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": "next"}]}


def test_side_requests_do_not_reason_and_headless_tools_make_no_calls() -> None:
    side = _request(kind="side", lineage="side:1", head="side:title", head_tokens=300)
    body = AnthropicWire(MODEL, steer=True).root(_head("side:title", 300, False), side, "t", "k")
    assert body["thinking"] == {"type": "disabled"}
    assert "tools" not in body
    assert body["custom_params"]["sim"] == {
        "reasoning_tokens": 0,
        "content_tokens": 100,
        "tool_calls": 0,
    }


def _smg(key: str) -> dict[str, str]:
    return {"x-smg-routing-key": key}


def test_copies_suffix_their_identity_headers_and_keep_the_others() -> None:
    shape = generate(SyntheticParams(sessions=2, turns=4, compact_after=2, seed=1))
    planned = plan(shape, copies=3, ramp_s=100.0, seed=7)
    assert [p.uid for p in planned][:3] == [s.id for s in shape.sessions] + [
        shape.sessions[0].id + "~1"
    ]
    assert len(planned) == 6
    assert all(0.0 <= p.start_s <= 100.0 for p in planned)
    assert plan(shape, copies=3, ramp_s=100.0, seed=7) == planned
    copy = planned[2]
    compacted = next(r for r in copy.session.requests if r.compacted)
    headers = request_headers(copy, compacted, chat_only=False, extra=_smg)
    assert headers["x-claude-code-session-id"] == copy.session.id + "~1"
    assert headers["x-claude-code-context-compacted"] == "auto"
    assert headers["x-claude-code-request-class"] == "main"
    assert headers["x-smg-routing-key"] == copy.uid


def test_chat_only_sends_the_conversation_under_x_session_id() -> None:
    session = ShapeSession(id="s", requests=[_request(), _request(agent_id="a7", at_s=1.0)])
    planned = PlannedSession(session, "s~2", "~2", 0.0)
    headers = request_headers(planned, session.requests[1], chat_only=True, extra=_smg)
    # The recorded session id (a copy's suffixed), and the subagent within it.
    assert headers == {"x-session-id": "s-1~2/a7", "x-smg-routing-key": "s-1~2/a7"}
    opencode_child = _request(headers={"x-session-id": "ses_2", "x-parent-session-id": "ses_1"})
    assert request_headers(planned, opencode_child, chat_only=True) == {"x-session-id": "ses_2~2"}
    assert request_headers(planned, opencode_child, chat_only=False) == {
        "x-session-id": "ses_2~2",
        "x-parent-session-id": "ses_1~2",
    }
    no_id = _request(headers={})
    assert request_headers(planned, no_id, chat_only=True) == {"x-session-id": "s~2"}
    codex = _request(headers={"session_id": "c-1"})
    assert cache_key(planned, codex) == "c-1~2"


def _result(session: str, index: int, head: str, sent: float, **kw: Any) -> RequestResult:
    fields: dict[str, Any] = {
        "session": session,
        "index": index,
        "lineage": "main",
        "kind": "main",
        "turn": 1,
        "head": head,
        "head_tokens": 30_000,
        "compacted": False,
        "ok": True,
        "error": None,
        "sent_s": sent,
        "first_token_s": sent + 1.0,
        "ttft": 20.0,
    }
    fields.update(kw)
    return RequestResult(**fields)


def test_head_reuse_needs_another_session_to_have_prefilled_the_head_first() -> None:
    results = mark_heads(
        [
            _result("a", 0, "p", 0.0),  # first: nothing prefilled before
            _result("b", 0, "p", 0.5),  # sent before a's first token came
            _result("c", 0, "p", 2.0, cached_tokens=29_800, ttft=8.0),  # a's head was there
            _result("c", 3, "p", 9.0, lineage="main#2", cached_tokens=100),  # a root, no hit
            _result("d", 0, "q", 9.0),  # nobody used q
        ],
        track_interval=256,
    )
    assert [r.head_reuse for r in results] == [False, False, True, False, False]
    assert [r.head_eligible for r in results] == [False, False, True, True, False]
    assert [r.head_hit for r in results] == [False, False, True, False, False]
    summary = summarize_replay(results)
    assert summary["head_reuse_ttft"]["p50"] == 8.0
    assert summary["head_hits"] == {"eligible": 2, "hits": 1, "hit_ratio": 0.5}
    assert summary["by_kind"]["main"]["head_hits"] == summary["head_hits"]


def test_main_turns_after_a_side_request_are_counted_with_their_misses() -> None:
    results = [
        _result("a", 2, "p", 5.0, turn=2, eligible=True, hit=True, after_side=True),
        _result("a", 4, "p", 9.0, turn=3, eligible=True, hit=False, after_side=True),
        _result("a", 5, "p", 9.0, turn=4, eligible=True, hit=False),
        _result("a", 1, "s", 1.0, kind="side", lineage="side:1", ok=False, error="HTTP 500"),
    ]
    summary = summarize_replay(results)
    assert summary["main_after_side"] == {"turns": 2, "misses": 1}
    assert summary["by_kind"]["main"]["hits"] == 1
    assert summary["by_kind"]["main"]["eligible"] == 3
    assert summary["by_kind"]["side"]["errors"] == 1
    assert summary["error_samples"] == ["a#1: HTTP 500"]
    text = markdown({"flashbox": summary})
    assert "| flashbox | main | 3 | 33.3% (1/3) | 20.0 | 20.0 | - |" in text
    assert "| 1 / 2 | 1 |" in text


def test_a_shape_without_max_tokens_sends_none_where_the_api_allows() -> None:
    req = _request(max_tokens=0)
    assert "max_output_tokens" not in ResponsesWire(MODEL, True).root(_head(), req, "t", "k")
    assert "max_tokens" not in ChatWire(MODEL, True, False).root(_head(), req, "t", "k")
    assert AnthropicWire(MODEL, True).root(_head(), req, "t", "k")["max_tokens"] == 32_000


class _SlowSummaryWire:
    """Answers at once, except the compaction request (prompt 9000), which takes a while."""

    api: Api = "anthropic"

    def __init__(self) -> None:
        self.order: list[int] = []

    def root(self, head: Any, req: ShapeRequest, text: str, cache_key: str) -> dict[str, Any]:
        return {"prompt": req.prompt_tokens}

    def extend(
        self, parent: dict[str, Any], answer: StreamRecord, head: Any, req: ShapeRequest, text: str
    ) -> dict[str, Any]:
        return {"prompt": req.prompt_tokens}

    async def send(
        self, client: Any, url: str, body: dict[str, Any], headers: Mapping[str, str]
    ) -> StreamRecord:
        if body["prompt"] == 9000:
            await asyncio.sleep(0.2)
        self.order.append(body["prompt"])
        return StreamRecord(ok=True, ttft=0.001, prompt_tokens=body["prompt"])


def test_a_sessions_main_requests_go_one_at_a_time_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The root after a compaction is recorded 0.05 s after the summary request was sent; the
    # summary takes 0.2 s here. The root must not overtake it (nor the side request wait).
    requests = [
        _request(prompt_tokens=3000),
        _request(at_s=0.01, extends=0, prompt_tokens=9000),
        _request(at_s=0.02, lineage="side:1", kind="side", head="side:t", head_tokens=100,
                 prompt_tokens=500),
        _request(at_s=0.06, lineage="main#2", compacted=True, prompt_tokens=4000),
    ]  # fmt: skip
    shape = Shape(
        format="flashbox-session-shape/1", client="synthetic", client_version="t",
        api="anthropic", notes="", sessions=[ShapeSession(id="s", requests=requests)],
    )  # fmt: skip
    wire = _SlowSummaryWire()
    monkeypatch.setattr(replay_module, "wire_for", lambda *a, **k: wire)
    cfg = ReplayConfig(url="http://127.0.0.1:9/v1", model=MODEL, time_scale=1.0)
    results = asyncio.run(replay_module.replay(shape, cfg))
    assert wire.order == [3000, 500, 9000, 4000]
    assert all(r.ok for r in results)
