"""Session shapes: what real agentic clients send under one session, as a file to replay.

A shape (`bench/shapes/*.json`, written by the recorder or by bench/shape_synth.py) lists per
session every request the client sent: when (`at_s`, seconds since the session's first
request), on which conversation (`lineage`: the main conversation, "main#2" after a
compaction, a subagent's, a side request's), with which head (system prompt + tools: equal ids
are identical heads, also across sessions), how large the prompt and the answer were, and
which turn it extends. bench/replay.py turns it back into requests. This module is the format:
its model, and a loader that refuses what the replay could not honour, with messages that say
where and what to fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

FORMAT: Final = "flashbox-session-shape/1"
Client = Literal["claude-code", "codex", "opencode", "synthetic"]
Api = Literal["anthropic", "responses", "openai"]
Kind = Literal["main", "subagent", "side"]
KINDS: tuple[Kind, ...] = ("main", "subagent", "side")

# Bounds on what one file may ask of the replay (house style: every bound explicit).
MAX_SHAPE_BYTES = 64 * 1024 * 1024
MAX_SESSIONS = 100_000
MAX_REQUESTS_PER_SESSION = 10_000
# GLM-5.3-Flash's context is 1M tokens at most; a larger prompt is a recording error.
MAX_PROMPT_TOKENS = 1_048_576
# A loader message lists at most this many problems (the rest are counted).
MAX_PROBLEMS = 20

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9a-z-]+$")


class ShapeError(ValueError):
    """A shape file the replay cannot use; the message names each problem and where it is."""


class _Model(BaseModel):
    # Unknown fields are refused: a typo ("extend") would otherwise replay a different shape.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ShapeRequest(_Model):
    at_s: float = Field(ge=0.0)
    lineage: str = Field(min_length=1, max_length=200)
    kind: Kind
    agent_id: str | None
    head: str = Field(min_length=1, max_length=200)
    head_tokens: int = Field(ge=0, le=MAX_PROMPT_TOKENS)
    prompt_tokens: int = Field(ge=1, le=MAX_PROMPT_TOKENS)
    extends: int | None = Field(ge=0)
    output_tokens: int = Field(ge=0, le=MAX_PROMPT_TOKENS)
    tool_calls: int = Field(ge=0, le=1_000)
    max_tokens: int = Field(ge=0, le=MAX_PROMPT_TOKENS)  # 0: the client sent none
    stream: bool
    compacted: bool
    headers: dict[str, str]

    @field_validator("headers")
    @classmethod
    def _lower_case_names(cls, headers: dict[str, str]) -> dict[str, str]:
        # HTTP header names are case-insensitive; the replay looks them up in lower case.
        out: dict[str, str] = {}
        for name, value in headers.items():
            lower = name.lower()
            if not _HEADER_NAME.match(lower):
                raise ValueError(f"{name!r} is not an HTTP header name")
            if lower in out:
                raise ValueError(f"header {name!r} is given twice (names ignore case)")
            out[lower] = value
        return out


class ShapeSession(_Model):
    id: str = Field(min_length=1, max_length=200)
    requests: list[ShapeRequest] = Field(min_length=1, max_length=MAX_REQUESTS_PER_SESSION)


class Shape(_Model):
    format: Literal["flashbox-session-shape/1"]
    client: Client
    client_version: str
    api: Api
    notes: str
    sessions: list[ShapeSession] = Field(min_length=1, max_length=MAX_SESSIONS)


@dataclass(frozen=True)
class HeadInfo:
    """A head as the replay builds it: its size, and whether it lists tools (a head only side
    requests use has none: Claude Code's titles and summaries are sent without tools)."""

    tokens: int
    with_tools: bool


def heads_of(shape: Shape) -> dict[str, HeadInfo]:
    """Head id -> HeadInfo over the whole file (the loader checked the sizes agree)."""
    tokens: dict[str, int] = {}
    tools: dict[str, bool] = {}
    for session in shape.sessions:
        for request in session.requests:
            tokens.setdefault(request.head, request.head_tokens)
            tools[request.head] = tools.get(request.head, False) or request.kind != "side"
    return {head: HeadInfo(tokens[head], tools[head]) for head in tokens}


def _problems(shape: Shape) -> Iterator[str]:
    """What the schema cannot say: references, order, and agreement between requests."""
    seen_ids: set[str] = set()
    head_tokens: dict[str, tuple[int, str]] = {}
    for s, session in enumerate(shape.sessions):
        where_s = f"sessions[{s}] (id {session.id!r})"
        if session.id in seen_ids:
            yield f"{where_s}: the id is used by an earlier session"
        seen_ids.add(session.id)
        lineages: dict[str, ShapeRequest] = {}
        for i, r in enumerate(session.requests):
            where = f"{where_s}.requests[{i}]"
            if i == 0 and r.at_s != 0.0:
                yield f"{where}: the first request's at_s must be 0 (times count from it)"
            if i > 0 and r.at_s < session.requests[i - 1].at_s:
                yield f"{where}: at_s {r.at_s} is before the previous request's; list in send order"
            if r.head_tokens > r.prompt_tokens:
                yield f"{where}: head_tokens {r.head_tokens} > prompt_tokens {r.prompt_tokens}"
            if 0 < r.max_tokens < r.output_tokens:
                yield f"{where}: output_tokens {r.output_tokens} > max_tokens {r.max_tokens}"
            first = lineages.setdefault(r.lineage, r)
            for field in ("kind", "head", "agent_id"):
                if getattr(r, field) != getattr(first, field):
                    yield (
                        f"{where}: {field} {getattr(r, field)!r} differs from lineage "
                        f"{r.lineage!r}'s first request ({getattr(first, field)!r})"
                    )
            known = head_tokens.setdefault(r.head, (r.head_tokens, where))
            if known[0] != r.head_tokens:
                yield (
                    f"{where}: head {r.head!r} has head_tokens {r.head_tokens}, but "
                    f"{known[0]} at {known[1]} (equal head ids are identical heads)"
                )
            if r.extends is None:
                continue
            if r.extends >= i:
                yield f"{where}: extends {r.extends} is not an earlier request of this session"
                continue
            parent = session.requests[r.extends]
            if parent.lineage != r.lineage:
                yield (
                    f"{where}: extends request {r.extends} of lineage {parent.lineage!r}, "
                    f"not its own ({r.lineage!r})"
                )
            # Equal: the same prompt sent again (opencode repeats a compaction that failed).
            if parent.prompt_tokens > r.prompt_tokens:
                yield (
                    f"{where}: prompt_tokens {r.prompt_tokens} is smaller than those of the "
                    f"turn it extends ({parent.prompt_tokens}, request {r.extends})"
                )


def _pydantic_lines(exc: pydantic.ValidationError) -> list[str]:
    lines = []
    for error in exc.errors():
        path = ".".join(str(part) for part in error["loc"]) or "(top level)"
        lines.append(f"{path}: {error['msg']}")
    return lines


def _refuse(source: str, lines: list[str]) -> ShapeError:
    shown = lines[:MAX_PROBLEMS]
    more = len(lines) - len(shown)
    tail = [f"... and {more} more"] if more else []
    return ShapeError("\n  ".join([f"{source}: not a usable session shape:", *shown, *tail]))


def parse_shape(text: str | bytes, source: str = "<shape>") -> Shape:
    """A validated Shape from JSON text; ShapeError names every problem found."""
    if len(text) > MAX_SHAPE_BYTES:
        raise ShapeError(f"{source}: {len(text)} bytes, over the {MAX_SHAPE_BYTES}-byte bound")
    try:
        shape = Shape.model_validate_json(text)
    except pydantic.ValidationError as exc:
        lines = _pydantic_lines(exc)
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            lines = [f"not JSON: {exc.errors()[0]['msg']}"]
        elif any(e["loc"] == ("format",) for e in exc.errors()):
            # Another format (or version): the other messages would only be noise.
            lines = [f"format must be {FORMAT!r} (this reader knows no other version)"]
        raise _refuse(source, lines) from None
    problems = list(_problems(shape))
    if problems:
        raise _refuse(source, problems)
    return shape


def load_shape(path: Path) -> Shape:
    """parse_shape of a file, refusing one over MAX_SHAPE_BYTES before reading it."""
    size = path.stat().st_size
    if size > MAX_SHAPE_BYTES:
        raise ShapeError(f"{path}: {size} bytes, over the {MAX_SHAPE_BYTES}-byte bound")
    return parse_shape(path.read_bytes(), source=str(path))


def dump_shape(shape: Shape) -> str:
    """The shape as the file format's JSON (what load_shape reads back)."""
    return shape.model_dump_json(indent=1) + "\n"
