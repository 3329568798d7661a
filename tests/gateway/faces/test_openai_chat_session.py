"""The OpenAI chat face's session hints: x-session-id, and opencode's subagent child sessions
(x-parent-session-id), which are conversations of their parent's session."""

from __future__ import annotations

import orjson

from gateway.core.retry import route_context
from gateway.faces.openai_chat.input import parse_chat
from gateway.settings import Settings

SETTINGS = Settings()
BODY = orjson.dumps(
    {"model": "glm-5.3-flash", "messages": [{"role": "user", "content": "explore the repo"}]}
)


def test_a_session_header_names_the_session() -> None:
    hints = parse_chat(BODY, SETTINGS, "ses_1").core.session
    assert (hints.header, hints.conversation) == ("ses_1", None)


def test_a_child_session_is_a_conversation_of_its_parent() -> None:
    parent = parse_chat(BODY, SETTINGS, "ses_1").core
    child = parse_chat(BODY, SETTINGS, "ses_2", "ses_1").core
    assert (child.session.header, child.session.conversation) == ("ses_1", "ses_2")
    routes = [route_context(c, SETTINGS, "rid", "p", "h", 0, [], [], 0) for c in (parent, child)]
    assert routes[0].session_key == routes[1].session_key
    assert routes[0].lineage != routes[1].lineage
    assert routes[1].kind == "subagent"


def test_a_parent_header_alone_changes_nothing() -> None:
    hints = parse_chat(BODY, SETTINGS, None, "ses_1").core.session
    assert (hints.header, hints.conversation) == (None, None)
