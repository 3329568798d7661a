"""Session keys: header, then body fields, then the conversation's root; always hashed."""

from __future__ import annotations

from gateway.routing.session_key import session_key

SYSTEM = {"role": "system", "content": "You are a coding agent."}
FIRST = {"role": "user", "content": "Fix the failing test."}
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
FIELDS = ["metadata.session_id", "user"]


def key(header: str | None = None, body: dict[str, object] | None = None, **kw: object) -> str:
    messages = kw.get("messages", [SYSTEM, FIRST])
    return session_key(header, body or {}, FIELDS, messages, TOOLS)  # type: ignore[arg-type]


def test_header_wins_and_is_hashed() -> None:
    k = key("conv-42", {"user": "alice"})
    assert k == key("conv-42") != key(None, {"user": "alice"})
    assert "conv-42" not in k
    assert len(k) == 32


def test_body_fields_in_order() -> None:
    both = key(None, {"metadata": {"session_id": "s1"}, "user": "alice"})
    assert both == key(None, {"metadata": {"session_id": "s1"}, "user": "bob"})
    assert key(None, {"user": "alice"}) != key(None, {"user": "bob"})
    # A field's value never collides with the same text in the header or another field.
    assert key("s1") != both != key(None, {"user": "s1"})


def test_conversation_root_is_stable_across_turns() -> None:
    turn1 = key(messages=[SYSTEM, FIRST])
    later = [
        SYSTEM,
        FIRST,
        {"role": "assistant", "content": "Reading it."},
        {"role": "user", "content": "Now run the tests."},
    ]
    assert key(messages=later) == turn1
    assert key(messages=[SYSTEM, {"role": "user", "content": "Other task."}]) != turn1
    other_tools = session_key(None, {}, FIELDS, [SYSTEM, FIRST], [])
    assert other_tools != turn1
