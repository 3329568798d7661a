"""The session key of a chat request, and its lineage key, hashed: the only forms routing
stores or logs.

Session, in order: the `x-session-id` header; else the first configured body field that is set
(`user`, `metadata.<key>`); else the conversation's root — system prompt(s), the first user
message and the tool list — which stays the same across the turns of one conversation.

Lineage: one conversation within a session. A session named by a header or a field holds
several (the main conversation, subagents, side requests such as titles, the conversation
restarted after compaction), each with its own prompt and so its own checkpoint: the lineage
key is the session's, the agent id the client sent, and the conversation's root (the rendered
prompt's head, digested once by the caller, and the first user message). A session keyed by its
root is one lineage.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

# 128 bits: collisions between live sessions are not a concern, and the hex stays short.
_DIGEST_BYTES = 16


def _digest(kind: str, material: bytes) -> str:
    return hashlib.blake2b(kind.encode() + b"\0" + material, digest_size=_DIGEST_BYTES).hexdigest()


def _field(body: Mapping[str, Any], path: str) -> str | None:
    value: Any = body
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def conversation_root(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
) -> bytes:
    """Leading system/developer messages, the first user message, and the tools."""
    root: list[Any] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            root.append([role, message.get("content")])
            continue
        if role == "user":
            root.append([role, message.get("content")])
        break
    return orjson.dumps([root, list(tools or [])], option=orjson.OPT_SORT_KEYS)


def first_user(messages: Sequence[Mapping[str, Any]]) -> Any:
    """The first user message's content (None when there is none)."""
    for message in messages:
        if message.get("role") == "user":
            return message.get("content")
    return None


def digest_text(kind: str, text: str) -> str:
    """A digest of a text the key functions need (a rendered prompt's head)."""
    return _digest(kind, text.encode())


def lineage_key(
    session: str, agent: str | None, head: str, messages: Sequence[Mapping[str, Any]]
) -> str:
    """A conversation of `session`: its agent id, its head's digest and first user message."""
    material = orjson.dumps([session, agent or "", head, first_user(messages)])
    return _digest("lineage", material)


def named_session(header: str | None, body: Mapping[str, Any], fields: Sequence[str]) -> str | None:
    """The session the client named (a header, else a configured body field), if it did."""
    if header:
        return _digest("header", header.encode())
    for path in fields:
        value = _field(body, path)
        if value is not None:
            return _digest("field:" + path, value.encode())
    return None


def session_key(
    header: str | None,
    body: Mapping[str, Any],
    fields: Sequence[str],
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
) -> str:
    return named_session(header, body, fields) or _digest(
        "root", conversation_root(messages, tools)
    )
