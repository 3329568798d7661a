"""The session key of a chat request, hashed: the only form routing stores or logs.

In order: the `x-session-id` header; else the first configured body field that is set
(`user`, `metadata.<key>`); else the conversation's root — system prompt(s), the first user
message and the tool list — which stays the same across the turns of one conversation.
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


def session_key(
    header: str | None,
    body: Mapping[str, Any],
    fields: Sequence[str],
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
) -> str:
    if header:
        return _digest("header", header.encode())
    for path in fields:
        value = _field(body, path)
        if value is not None:
            return _digest("field:" + path, value.encode())
    return _digest("root", conversation_root(messages, tools))
