"""Recorded agent-CLI requests -> the request shape of their sessions (`flashbox-session-shape/1`).

    requests = [parse_record(record, renderer) for record in records]   # text still inside
    sessions = shape_sessions(requests, ids)                             # no text left

Only sizes and structure leave this module: token counts, which request extends which, kinds,
heads as opaque ids, and the routing headers with every id replaced by a stand-in (`Pseudonyms`).

How each field is derived (the same words go into the shape file's notes):
- A request is first turned into what the gateway renders, with the gateway's own converters
  (Anthropic Messages, Responses; chat completions as sent). Its head is the leading run of
  system messages plus the tools plus the template arguments; `head` names equal heads alike.
- `prompt_tokens` and `head_tokens`: UTF-8 bytes / 4, rounded up, of the prompt rendered by the
  gateway's renderer with the bundled template (the simulator's tokenizer counts the same);
  the head is rendered alone, without the generation prompt. `output_tokens`: characters of
  the recorder's answer (reasoning, text, tool names and arguments) / 4, rounded up.
- `extends`: the latest earlier request of the same agent (header) and head whose messages
  after the head are a prefix of this one's, its last message allowed to have grown (a client
  that appends to the last user message); the longest such prefix wins.
- `kind` and `lineage`: a request that extends another takes its lineage. A new root with an
  agent key (Claude Code's `x-claude-code-agent-id`, Codex's subagent thread under
  `x-openai-subagent`, opencode's child session under `x-parent-session-id`) is `subagent`
  (`agent:N`); with the main head (that of the first tool-offering request without an agent
  key) it is `main`, or after the first main root a compaction restart (`main#2`, ...), as is
  a tool-offering root after a request the client marks as its compaction (Claude Code's
  `x-claude-code-request-class: compaction`, Codex's `request_kind: compaction`), whose head
  becomes the main head; any other root (another system prompt, no tools) is `side`
  (`side:N`).
- `compacted`: a main or agent restart as above, or Claude Code's
  `x-claude-code-context-compacted` header.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.reasoning_codec import ReasoningCodec
from gateway.faces.anthropic import convert as anthropic_convert
from gateway.faces.anthropic.protocol import MessagesRequest
from gateway.faces.responses import convert as responses_convert
from gateway.render import RenderSettings, TemplateSource, build_renderer
from gateway.render.base import Renderer
from gateway.render.source import BUNDLED_TEMPLATE
from gateway.settings import Settings

FORMAT = "flashbox-session-shape/1"
BYTES_PER_TOKEN = 4
# The headers a router may key on; every other header is dropped.
ROUTING_HEADERS = (
    "x-session-id",
    "x-session-affinity",
    "x-parent-session-id",
    "x-claude-code-session-id",
    "x-claude-code-agent-id",
    "x-claude-code-parent-agent-id",
    "x-claude-code-prompt-id",
    "x-claude-code-request-class",
    "x-claude-1p-request-class",
    "x-claude-code-agent-type",
    "x-claude-code-compaction",
    "x-claude-code-context-compacted",
    "session_id",
    "session-id",
    "thread-id",
    "x-codex-window-id",
    "x-codex-parent-thread-id",
    "x-openai-subagent",
    "x-codex-turn-metadata",
)
# Codex's turn metadata is JSON full of ids; only what says what kind of request it is stays.
_TURN_METADATA_KEYS = ("request_kind", "compaction")
API_OF_PATH = {
    "/v1/messages": "anthropic",
    "/v1/responses": "responses",
    "/v1/chat/completions": "openai",
}


def bundled_renderer() -> Renderer:
    return build_renderer(
        RenderSettings(), source=TemplateSource(BUNDLED_TEMPLATE.read_text(), "bundled")
    )


def tokens(text: str) -> int:
    return math.ceil(len(text.encode()) / BYTES_PER_TOKEN)


@dataclass(frozen=True)
class Parsed:
    """One model request as the gateway would render it; holds the text, never written out."""

    api: str
    received_at: float
    headers: dict[str, str]
    head_key: str
    head_tokens: int
    prompt_tokens: int
    messages: list[str]  # canonical JSON of each message after the head
    has_tools: bool
    max_tokens: int
    stream: bool
    output_tokens: int
    tool_calls: int

    @property
    def session_key(self) -> str:
        h = self.headers
        return (
            h.get("x-claude-code-session-id")
            or h.get("x-parent-session-id")
            or h.get("x-session-id")
            or h.get("session_id")
            or h.get("session-id")
            or ""
        )

    @property
    def asks_compaction(self) -> bool:
        """The client marks this request as the one that writes a compaction summary."""
        h = self.headers
        return (
            h.get("x-claude-code-request-class") == "compaction"
            or "x-claude-code-compaction" in h
            or '"request_kind":"compaction"' in h.get("x-codex-turn-metadata", "")
        )

    @property
    def agent_key(self) -> str | None:
        h = self.headers
        if "x-claude-code-agent-id" in h:
            return h["x-claude-code-agent-id"]
        if "x-openai-subagent" in h or "x-codex-parent-thread-id" in h:
            return h.get("thread-id") or h.get("x-codex-window-id") or "codex-subagent"
        if "x-parent-session-id" in h:
            return h.get("x-session-id") or "opencode-child"
        return None


def _canon_content(content: Any) -> Any:
    """Text parts joined into one string: a client may send the same text as a string or as
    blocks (Claude Code does, for a message once it is no longer the last)."""
    if isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") in ("text", "input_text") for part in content
    ):
        return "".join(str(part.get("text", "")) for part in content)
    return content


def _canon_message(message: Mapping[str, Any]) -> str:
    kept: dict[str, Any] = {k: v for k, v in message.items() if v is not None}
    if "content" in kept:
        kept["content"] = _canon_content(kept["content"])
    calls = []
    for call in kept.get("tool_calls") or []:
        function = dict(call.get("function") or {})
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                function["arguments"] = json.loads(arguments)
        calls.append({**call, "function": function})
    if calls:
        kept["tool_calls"] = calls
    return json.dumps(kept, sort_keys=True, ensure_ascii=False)


def _convert(
    api: str, body: Mapping[str, Any], codec: ReasoningCodec, settings: Settings
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, dict[str, Any], int]:
    """(renderer messages, tools, template kwargs, max_tokens; 0 when the client sent none)."""
    if api == "anthropic":
        request = MessagesRequest.model_validate(body)
        messages = anthropic_convert.convert_messages(request, codec, settings)
        tools = anthropic_convert.convert_tools(request.tools)
        return messages, tools, anthropic_convert.template_kwargs(request), request.max_tokens
    if api == "responses":
        tools, names = responses_convert.convert_tools(body.get("tools"))
        items = body.get("input") or ""
        messages = responses_convert.convert_input(body.get("instructions"), items, codec, names)
        reasoning = body.get("reasoning") or {}
        kwargs, _ = responses_convert.effort(reasoning.get("effort"))
        return messages, tools or None, kwargs, int(body.get("max_output_tokens") or 0)
    effort = body.get("reasoning_effort")
    kwargs = {"reasoning_effort": effort} if isinstance(effort, str) else {}
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return list(body.get("messages") or []), body.get("tools") or None, kwargs, int(max_tokens)


def _generation_prompt(renderer: Renderer, kwargs: Mapping[str, Any]) -> str:
    marker = "\x00"
    rendered = renderer.render([{"role": "user", "content": marker}], None, kwargs)
    return rendered.rsplit(marker, 1)[1]


def parse_record(
    record: Mapping[str, Any],
    renderer: Renderer,
    codec: ReasoningCodec,
    settings: Settings,
) -> Parsed | None:
    """The parsed model request of one recorder record; None for other calls (HEAD, counts)."""
    api = API_OF_PATH.get(str(record["path"]).split("?", 1)[0])
    body = record.get("body")
    if record["method"] != "POST" or api is None or not isinstance(body, dict):
        return None
    messages, tools, kwargs, max_tokens = _convert(api, body, codec, settings)
    split = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
    head = messages[:split]
    prompt = renderer.render(messages, tools, kwargs)
    head_text = renderer.render(head, tools, kwargs).removesuffix(
        _generation_prompt(renderer, kwargs)
    )
    answer = record.get("answer") or {}
    return Parsed(
        api=api,
        received_at=float(record["received_at"]),
        headers={str(k).lower(): str(v) for k, v in record["headers"].items()},
        head_key=json.dumps([head, tools, kwargs], sort_keys=True, ensure_ascii=False),
        head_tokens=tokens(head_text),
        prompt_tokens=tokens(prompt),
        messages=[_canon_message(m) for m in messages[split:]],
        has_tools=bool(tools),
        max_tokens=max_tokens,
        stream=bool(body.get("stream", False)),
        output_tokens=math.ceil(int(answer.get("output_chars", 0)) / BYTES_PER_TOKEN),
        tool_calls=int(answer.get("tool_calls", 0)),
    )


def _grew_from(earlier: Sequence[str], later: Sequence[str]) -> bool:
    """`later` starts with `earlier`, whose last message may have grown in `later`."""
    if not earlier:
        return True
    n = len(earlier)
    if len(later) < n or list(later[: n - 1]) != list(earlier[: n - 1]):
        return False
    if later[n - 1] == earlier[n - 1]:
        return True
    old, new = json.loads(earlier[n - 1]), json.loads(later[n - 1])
    return (
        old.get("role") == new.get("role")
        and isinstance(old.get("content"), str)
        and isinstance(new.get("content"), str)
        and new["content"].startswith(old["content"])
    )


# (pattern, stand-in for the n-th distinct value): the same length and alphabet.
_ID_PATTERNS: tuple[tuple[re.Pattern[str], Callable[[int], str]], ...] = (
    (
        re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
        lambda n: f"{n:08x}-0000-4000-8000-{n:012x}",
    ),
    (re.compile(r"\bses_[0-9A-Za-z]{26}\b"), lambda n: f"ses_{n:026d}"),
    (re.compile(r"\ba[0-9a-f]{16}\b"), lambda n: f"a{n:016x}"),
)


def ids_in(text: str) -> list[str]:
    """The ids (of the kinds Pseudonyms replaces) inside a text."""
    return [match.group() for pattern, _ in _ID_PATTERNS for match in pattern.finditer(text)]


class Pseudonyms:
    """Real ids -> stand-ins numbered in order of first sight: equal ids stay equal, across
    the sessions of one file, and nothing of the original is kept."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def replace(self, text: str) -> str:
        for pattern, make in _ID_PATTERNS:

            def stand_in(match: re.Match[str], make: Callable[[int], str] = make) -> str:
                return self._seen.setdefault(match.group(), make(len(self._seen) + 1))

            text = pattern.sub(stand_in, text)
        return text

    def header(self, name: str, value: str) -> str:
        if name == "x-codex-turn-metadata":
            try:
                metadata = json.loads(value)
            except ValueError:
                return "{}"
            kept = {k: metadata[k] for k in _TURN_METADATA_KEYS if k in metadata}
            if isinstance(kept.get("compaction"), dict):  # its trigger and phase, no ids
                kept["compaction"] = {
                    k: v for k, v in kept["compaction"].items() if k in ("trigger", "phase")
                }
            return json.dumps(kept, sort_keys=True, separators=(",", ":"))
        return self.replace(value)


def routing_headers(headers: Mapping[str, str], ids: Pseudonyms) -> dict[str, str]:
    return {name: ids.header(name, headers[name]) for name in ROUTING_HEADERS if name in headers}


def shape_session(
    requests: Sequence[Parsed], ids: Pseudonyms, heads: dict[str, str]
) -> list[dict[str, Any]]:
    """The shape's request list for one session's requests (any order; sorted by arrival).

    `heads` maps head keys to head ids for the whole file, so equal heads share an id
    across sessions; new heads are added to it."""
    ordered = sorted(requests, key=lambda r: r.received_at)
    start = ordered[0].received_at if ordered else 0.0
    main_head = next((r.head_key for r in ordered if r.agent_key is None and r.has_tools), None)
    compaction_asked = False
    lineages: list[str] = []
    counters: dict[str, int] = {}
    agent_numbers: dict[str, int] = {}
    out: list[dict[str, Any]] = []

    def fresh(base: str) -> str:
        counters[base] = counters.get(base, 0) + 1
        return base if counters[base] == 1 else f"{base}#{counters[base]}"

    for index, request in enumerate(ordered):
        parent = None
        for earlier in range(index - 1, -1, -1):
            candidate = ordered[earlier]
            if (
                candidate.agent_key == request.agent_key
                and candidate.head_key == request.head_key
                and _grew_from(candidate.messages, request.messages)
                and (parent is None or len(candidate.messages) > len(ordered[parent].messages))
            ):
                parent = earlier
        compacted = "x-claude-code-context-compacted" in request.headers
        if parent is not None:
            lineage = lineages[parent]
            kind = out[parent]["kind"]
        elif request.agent_key is not None:
            number = agent_numbers.setdefault(request.agent_key, len(agent_numbers) + 1)
            lineage, kind = fresh(f"agent:{number}"), "subagent"
            compacted = compacted or "#" in lineage
        elif request.head_key == main_head or (compaction_asked and request.has_tools):
            # Codex re-sends its developer messages after a compaction: a new main head.
            main_head, compaction_asked = request.head_key, False
            lineage, kind = fresh("main"), "main"
            compacted = compacted or "#" in lineage
        else:
            counters["side"] = counters.get("side", 0) + 1
            lineage, kind = f"side:{counters['side']}", "side"
        lineages.append(lineage)
        compaction_asked = compaction_asked or request.asks_compaction
        agent = request.agent_key
        out.append(
            {
                "at_s": round(request.received_at - start, 3),
                "lineage": lineage,
                "kind": kind,
                "agent_id": ids.replace(agent) if agent is not None else None,
                "head": heads.setdefault(request.head_key, f"h{len(heads) + 1}"),
                "head_tokens": request.head_tokens,
                "prompt_tokens": request.prompt_tokens,
                "extends": parent,
                "output_tokens": request.output_tokens,
                "tool_calls": request.tool_calls,
                "max_tokens": request.max_tokens,
                "stream": request.stream,
                "compacted": compacted,
                "headers": routing_headers(request.headers, ids),
            }
        )
    return out
