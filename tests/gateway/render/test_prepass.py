"""The Python pre-pass decides tool-result order exactly as the template's rules do."""

from __future__ import annotations

from typing import Any

from gateway.render.prepass import tool_order


def _assistant(*ids: Any) -> dict[str, Any]:
    calls = [{"id": i, "function": {"name": "f", "arguments": {}}} for i in ids]
    return {"role": "assistant", "tool_calls": calls}


def _tool(call_id: Any, content: Any = "r") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_results_follow_call_order() -> None:
    messages = [{"role": "user"}, _assistant("a", "b", "c"), _tool("c"), _tool("a"), _tool("b")]
    assert tool_order(messages) == [None, None, [[3, -1], [4, -1], [2, -1]], None, None]


def test_integer_ids_compare_as_text() -> None:
    messages = [_assistant(1, "2"), _tool("1"), _tool(2)]
    assert tool_order(messages) == [None, [[1, -1], [2, -1]], None]


def test_output_lists_are_placed_entry_by_entry() -> None:
    entries = [{"tool_call_id": "b", "output": "x"}, {"id": "a", "output": "y"}]
    messages = [_assistant("a", "b"), {"role": "tool", "content": entries}]
    assert tool_order(messages) == [None, [[1, 1], [1, 0]]]


def test_any_invalid_id_keeps_received_order() -> None:
    received = [[1, -1], [2, -1]]
    cases = [
        [_assistant("a", "b"), _tool("b"), _tool("b")],  # duplicate result
        [_assistant("a", "b"), _tool("b"), _tool("x")],  # unknown result
        [_assistant("a", "b"), _tool("b"), _tool("")],  # empty result id
        [_assistant("a", "a"), _tool("b"), _tool("a")],  # duplicate call
        [_assistant("a", ""), _tool("b"), _tool("a")],  # empty call id
        [_assistant("a", "A"), _tool("A"), _tool("b")],  # "b" names no call
        [{"role": "user"}, _tool("b"), _tool("a")],  # no assistant before the run
    ]
    for messages in cases:
        order = tool_order(messages)
        assert order is not None
        assert order[1] == received, messages


def test_case_variant_ids_are_distinct() -> None:
    messages = [_assistant("a", "A"), _tool("A"), _tool("a")]
    assert tool_order(messages) == [None, [[2, -1], [1, -1]], None]


def test_unusual_values_are_left_to_the_template() -> None:
    for messages in (
        [_assistant(1.5, "b"), _tool("b")],  # float id: engines print it their own way
        [_assistant(True, "b"), _tool("b")],  # bool id
        [_assistant("a"), _tool("a", {"k": "v"})],  # mapping content
        [_assistant("a"), {"role": "tool", "content": [{"output": "x", "id": "a"}, "s"]}],
    ):
        assert tool_order(messages) == [None, None]


def test_no_tool_messages_no_order() -> None:
    assert tool_order([{"role": "user", "content": "x"}]) is None
