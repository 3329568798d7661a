"""The one internal request every face parses its API's request into (hop 1's output).

Messages and tools are the renderer's dicts (the shape transformers' apply_chat_template takes);
tool_choice uses the parser registry's neutral form: "auto", "none", "required" or
{"type": "function", "function": {"name": ...}}. Nothing here names an API or a model family.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.core.images import ImageSlots

ToolChoice = str | dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Sampling:
    """What goes into /generate's sampling_params; None leaves the engine's default."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    # The client's stop strings (the model's own stops are added by gateway.sampling).
    stop: tuple[str, ...] = ()
    # A JSON schema (as JSON text) the output must match, via the engine's constrained decoding.
    json_schema: str | None = None


@dataclass(frozen=True, slots=True)
class SessionHints:
    """What routing derives the session key from (gateway.routing.session_key)."""

    # The face's session header (x-session-id, x-claude-code-session-id, ...), if any.
    header: str | None = None
    # Body fields the configured `routing.session_fields` may name (user, metadata.*).
    body: Mapping[str, Any] = field(default_factory=dict)
    # A conversation within the session (a subagent's id): kept apart from the main one.
    conversation: str | None = None
    # What the client says the request is, when it says (Claude Code's hint header
    # x-claude-code-request-class: main, subagent, workflow, compaction, auxiliary).
    request_class: str | None = None
    # The client compacted the conversation before this request: the session's previous main
    # conversation will not come back (Claude Code's x-claude-code-context-compacted).
    compacted: bool = False


@dataclass(frozen=True, slots=True)
class CoreRequest:
    api: str  # the face, for metrics: "openai", "anthropic", ...
    model: str  # the name the client asked for, echoed back
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: ToolChoice
    template_kwargs: dict[str, Any]
    sampling: Sampling
    stream: bool
    session: SessionHints
    # The bytes the request brought (its body; for Responses also the stored history its
    # previous_response_id names): what it may expand into is bounded relative to this, and
    # rendering a large one leaves the event loop (render_offload).
    body_bytes: int
    # False: the prompt closes the reasoning block itself, so the model answers at once.
    thinking: bool = True
    # True: a max_tokens past what fits in the context is lowered to fit, not refused.
    clamp_max_tokens: bool = False
    # False: at most one tool call per answer (Responses/chat parallel_tool_calls: false,
    # Anthropic's disable_parallel_tool_use), enforced by the engine (gateway.parsers).
    parallel_tool_calls: bool = True
    # Forwarded to /generate when upstream.forward_custom_params is on (the simulator's knobs).
    custom_params: Any = None
    # The request's images: their parts in `messages` are sentinels (gateway.core.images).
    images: ImageSlots | None = None
