"""Tool-result validation and ordering, done once in Python instead of inside the template.

The GLM template puts each run of `tool` messages in the order of the preceding assistant's
tool calls when every id is present, unique and known, and keeps the received order otherwise.
The bundled template accepts the answer precomputed as `flashbox_tool_order` (one entry per
message index: for a run's first message, the `[message index, entry index]` pairs to emit;
entry -1 means the whole message). Only runs whose values are plain JSON of the shapes the
template's id rules treat like Python (ids that are strings or integers, contents that are
absent, strings or lists, entries that are objects) are decided here; for anything else the
entry stays None and the template decides itself. Either way the text is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ORDER_VARIABLE = "flashbox_tool_order"

# Integers print the same in both engines well inside the i64 range.
_INT_LIMIT = 2**53


class _Decline(Exception):
    """This run holds a value whose template semantics we do not replicate here."""


def _id_of(obj: Any) -> str:
    if not isinstance(obj, dict):
        raise _Decline
    for key in ("tool_call_id", "id"):
        value = obj.get(key)
        if not value:
            continue
        if isinstance(value, str):
            return value
        if type(value) is int and -_INT_LIMIT < value < _INT_LIMIT:
            return str(value)
        raise _Decline
    return ""


def _has_output(part: Any) -> bool:
    return isinstance(part, dict) and "output" in part


def _results(messages: Sequence[Any], start: int, end: int) -> list[tuple[str, int, int]]:
    """(id, message index, entry index or -1) for every result of the run, in received order."""
    out: list[tuple[str, int, int]] = []
    for k in range(start, end + 1):
        message = messages[k]
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _Decline
        if isinstance(content, list) and content and _has_output(content[0]):
            out.extend((_id_of(entry), k, e) for e, entry in enumerate(content))
        else:
            out.append((_id_of(message), k, -1))
    return out


def _order_run(messages: Sequence[Any], start: int, end: int) -> list[list[int]]:
    received = [[k, -1] for k in range(start, end + 1)]
    previous = messages[start - 1] if start > 0 else None
    calls = (
        previous.get("tool_calls")
        if isinstance(previous, dict) and previous.get("role") == "assistant"
        else None
    )
    results = _results(messages, start, end)
    if not calls:
        return received
    if not isinstance(calls, list):
        raise _Decline
    position: dict[str, int] = {}
    for i, call in enumerate(calls):
        call_id = _id_of(call)
        if not call_id or call_id in position:
            return received
        position[call_id] = i
    placed: dict[int, list[int]] = {}
    for result_id, k, e in results:
        pos = position.get(result_id) if result_id else None
        if pos is None or pos in placed:
            return received
        placed[pos] = [k, e]
    return [placed[pos] for pos in sorted(placed)]


def tool_order(messages: Sequence[Any]) -> list[list[list[int]] | None] | None:
    """The precomputed order for every run of tool messages, or None when there are none."""
    order: list[list[list[int]] | None] | None = None
    n = len(messages)
    i = 0
    while i < n:
        message = messages[i]
        if not (isinstance(message, dict) and message.get("role") == "tool"):
            i += 1
            continue
        end = i
        while end + 1 < n and isinstance(messages[end + 1], dict):
            if messages[end + 1].get("role") != "tool":
                break
            end += 1
        if order is None:
            order = [None] * n
        try:
            order[i] = _order_run(messages, i, end)
        except _Decline:
            order[i] = None
        i = end + 1
    return order
