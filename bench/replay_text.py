"""The text a replayed request carries: heads built from their ids, and synthetic new text.

Heads are built from their id alone, so equal head ids give byte-identical system prompts and
tool lists in every session (and every copy of a session). Sizes are in the simulator's tokens:
4 bytes each (docs/simulator.md), and the synthetic text is ASCII, so `chars_per_token`
characters are one token.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from bench.shapes import HeadInfo
from bench.workload import synthetic_text

# Tool definitions make up about this share of an agentic client's ~30k-token head (Claude
# Code's: ~14k of them); the rest is the system prompt.
TOOL_SHARE = 0.4
# A head smaller than this (in tokens) gets no tools even when it should have them: the
# definitions alone would not fit.
MIN_TOOLS_HEAD_TOKENS = 1_024
# Simple schemas the simulator fills in (required strings, a bounded integer, an enum).
_TOOLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("read_file", {"path": {"type": "string"}}),
    ("edit_file", {"path": {"type": "string"}, "old": {"type": "string"}}),
    ("run_command", {"command": {"type": "string"}, "timeout_s": {"type": "integer"}}),
    ("search_code", {"pattern": {"type": "string"}}),
    ("list_dir", {"path": {"type": "string"}}),
    ("fetch_url", {"url": {"type": "string"}}),
    ("write_todos", {"items": {"type": "array", "items": {"type": "string"}}}),
    ("launch_agent", {"task": {"type": "string"}, "kind": {"enum": ["explore", "plan"]}}),
)


def stable_seed(*parts: object) -> int:
    """A seed from values, the same in every process (hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Head:
    id: str
    system: str
    tools: tuple[Tool, ...]


def build_head(head_id: str, info: HeadInfo, chars_per_token: float) -> Head:
    """The head `head_id` names, about `info.tokens` tokens of system prompt and tools."""
    budget = int(info.tokens * chars_per_token)
    tools: tuple[Tool, ...] = ()
    if info.with_tools and info.tokens >= MIN_TOOLS_HEAD_TOKENS:
        each = int(budget * TOOL_SHARE / len(_TOOLS))
        tools = tuple(
            Tool(
                name,
                synthetic_text(each, seed=stable_seed("tool", head_id, name)),
                {"type": "object", "properties": props, "required": sorted(props)},
            )
            for name, props in _TOOLS
        )
        budget -= sum(
            len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools
        )
    lead = f"[head {head_id}] "
    body = synthetic_text(max(0, budget - len(lead)), seed=stable_seed("head", head_id))
    return Head(head_id, lead + body, tools)


def new_text(tokens: int, uid: str, index: int, chars_per_token: float) -> str:
    """A request's own text; the lead makes sessions (and copies) differ right after a head."""
    lead = f"[{uid} #{index}] "
    chars = max(0, int(tokens * chars_per_token) - len(lead))
    return lead + synthetic_text(chars, seed=stable_seed("text", uid, index))


def split_text(text: str, parts: int) -> list[str]:
    share = max(1, len(text) // parts)
    return [text[i * share : (i + 1) * share if i < parts - 1 else len(text)] for i in range(parts)]
