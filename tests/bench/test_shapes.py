"""The session-shape loader (bench.shapes): valid files load, malformed ones are refused with
messages that say where and what."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench import shapes
from bench.procs import REPO_ROOT
from bench.shapes import FORMAT, ShapeError, dump_shape, heads_of, load_shape, parse_shape


def _request(**changes: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "at_s": 0.0,
        "lineage": "main",
        "kind": "main",
        "agent_id": None,
        "head": "cc:main",
        "head_tokens": 1000,
        "prompt_tokens": 1500,
        "extends": None,
        "output_tokens": 100,
        "tool_calls": 1,
        "max_tokens": 32000,
        "stream": True,
        "compacted": False,
        "headers": {"x-claude-code-session-id": "s-1"},
    }
    request.update(changes)
    return request


def _shape(*requests: dict[str, Any], sessions: int = 1) -> dict[str, Any]:
    reqs = list(requests) or [_request()]
    return {
        "format": FORMAT,
        "client": "claude-code",
        "client_version": "2.1.90",
        "api": "anthropic",
        "notes": "",
        "sessions": [{"id": f"s{i}", "requests": copy.deepcopy(reqs)} for i in range(sessions)],
    }


def _valid() -> dict[str, Any]:
    return _shape(
        _request(),
        _request(at_s=0.5, lineage="side:1", kind="side", head="cc:title", head_tokens=300,
                 prompt_tokens=600, tool_calls=0, max_tokens=512, output_tokens=20),
        _request(at_s=30.0, extends=0, prompt_tokens=2000),
        _request(at_s=31.0, lineage="agent:1", kind="subagent", agent_id="a1", head="cc:agent",
                 head_tokens=800, prompt_tokens=1200,
                 headers={"X-Claude-Code-Session-Id": "s-1", "x-claude-code-agent-id": "a1"}),
    )  # fmt: skip


def _refusal(doc: dict[str, Any] | str) -> str:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(ShapeError) as info:
        parse_shape(text, source="shape.json")
    message = str(info.value)
    assert message.startswith("shape.json: not a usable session shape:")
    return message


def test_a_valid_shape_loads_and_round_trips(tmp_path: Path) -> None:
    shape = parse_shape(json.dumps(_valid()))
    assert [r.lineage for r in shape.sessions[0].requests] == ["main", "side:1", "main", "agent:1"]
    # Header names are case-insensitive; the replay reads them in lower case.
    assert shape.sessions[0].requests[3].headers["x-claude-code-session-id"] == "s-1"
    path = tmp_path / "shape.json"
    path.write_text(dump_shape(shape))
    assert load_shape(path) == shape
    heads = heads_of(shape)
    assert heads["cc:main"].tokens == 1000
    assert heads["cc:main"].with_tools
    assert not heads["cc:title"].with_tools  # only side requests use it


def test_text_that_is_not_json_is_refused() -> None:
    assert "not JSON" in _refusal("{nope")


def test_another_format_is_refused_by_name() -> None:
    doc = _valid()
    doc["format"] = "flashbox-session-shape/2"
    message = _refusal(doc)
    assert "format must be 'flashbox-session-shape/1'" in message
    assert "sessions" not in message  # no noise from the rest of the file


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"kind": "helper"}, "sessions.0.requests.0.kind: Input should be 'main', 'subagent'"),
        ({"prompt_tokens": "1500"}, "sessions.0.requests.0.prompt_tokens: Input should be a valid"),
        ({"extend": 0}, "sessions.0.requests.0.extend: Extra inputs are not permitted"),
        ({"at_s": -1.0}, "sessions.0.requests.0.at_s: Input should be greater than or equal to 0"),
        ({"headers": {"bad name": "x"}}, "'bad name' is not an HTTP header name"),
        ({"headers": {"A": "1", "a": "2"}}, "header 'a' is given twice"),
        ({"head_tokens": 2000}, "requests[0]: head_tokens 2000 > prompt_tokens 1500"),
        ({"output_tokens": 40000}, "requests[0]: output_tokens 40000 > max_tokens 32000"),
        ({"max_tokens": -1}, "sessions.0.requests.0.max_tokens: Input should be greater than"),
        ({"at_s": 3.0}, "requests[0]: the first request's at_s must be 0"),
    ],
)
def test_a_malformed_request_is_refused_with_its_path(
    change: dict[str, Any], expected: str
) -> None:
    assert expected in _refusal(_shape(_request(**change)))


def test_a_missing_field_is_named() -> None:
    request = _request()
    del request["head"]
    assert "sessions.0.requests.0.head: Field required" in _refusal(_shape(request))


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        ({"extends": 1}, "requests[1]: extends 1 is not an earlier request of this session"),
        ({"extends": 0, "lineage": "agent:1"}, "extends request 0 of lineage 'main', not its own"),
        ({"extends": 0, "prompt_tokens": 1400}, "prompt_tokens 1400 is smaller than those"),
        ({"at_s": 0.0, "head": "cc:other"}, "head 'cc:other' differs from lineage 'main'"),
        ({"kind": "side"}, "kind 'side' differs from lineage 'main'"),
        ({"lineage": "x", "head_tokens": 900}, "head 'cc:main' has head_tokens 900, but 1000"),
    ],
)
def test_requests_must_agree_with_each_other(second: dict[str, Any], expected: str) -> None:
    doc = _shape(_request(), _request(**{"at_s": 1.0, "prompt_tokens": 2000, **second}))
    assert expected in _refusal(doc)


def test_requests_are_listed_in_send_order() -> None:
    doc = _shape(_request(), _request(at_s=5.0, lineage="b"), _request(at_s=4.0, lineage="c"))
    assert "requests[2]: at_s 4.0 is before the previous request's" in _refusal(doc)


def test_session_ids_are_unique() -> None:
    doc = _shape(sessions=2)
    doc["sessions"][1]["id"] = "s0"
    assert "sessions[1] (id 's0'): the id is used by an earlier session" in _refusal(doc)


def test_many_problems_are_listed_up_to_a_bound() -> None:
    doc = _shape(*[_request(at_s=float(i), lineage=f"l{i}", head_tokens=2000) for i in range(30)])
    message = _refusal(doc)
    assert message.count("> prompt_tokens") == shapes.MAX_PROBLEMS
    assert message.endswith("... and 10 more")


def test_a_file_over_the_size_bound_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps(_valid()))
    monkeypatch.setattr(shapes, "MAX_SHAPE_BYTES", 100)
    with pytest.raises(ShapeError, match="over the 100-byte bound"):
        load_shape(path)


def test_max_tokens_zero_means_the_client_sent_none() -> None:
    shape = parse_shape(json.dumps(_shape(_request(max_tokens=0, output_tokens=50))))
    assert shape.sessions[0].requests[0].max_tokens == 0


def test_a_turn_may_send_the_same_prompt_again() -> None:
    doc = _shape(_request(), _request(at_s=1.0, extends=0))  # opencode repeats a compaction
    assert parse_shape(json.dumps(doc)).sessions[0].requests[1].extends == 0


@pytest.mark.parametrize(
    "path", sorted((REPO_ROOT / "bench" / "shapes").glob("*.json")), ids=lambda p: p.name
)
def test_the_recorded_shapes_load(path: Path) -> None:
    shape = load_shape(path)
    assert shape.client in ("claude-code", "codex", "opencode", "synthetic")
