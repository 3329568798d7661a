"""The seam between the chat route and output parsing (hop 5).

The engine streams the text generated after the prompt. A parser is created per request
(and per choice), fed text deltas in order, and returns structured deltas as soon as they
are certain. Feeding the whole text at once and calling `finish` is the one-shot parse;
any split of the same text must yield deltas that assemble to the same result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ContentDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A new tool call: OpenAI's first delta for it carries index, id, type and name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDelta:
    """A fragment of the call's arguments JSON; the fragments concatenate to valid JSON."""

    index: int
    fragment: str


ParsedDelta = ReasoningDelta | ContentDelta | ToolCallStart | ToolCallArgumentsDelta


@dataclass(frozen=True, slots=True)
class RejectedToolCall:
    """Tool-call markup the parser did not turn into a call; its text stayed in the content.

    `reason` is a short label for `flashbox_tool_calls_rejected_total{reason}`:
    "undeclared" (the request has no tool of that name), "not_chosen" (tool_choice named
    another function) or "malformed" (no usable name: empty, over the length bound, or the
    output ended inside it). `name` is what the model wrote (cut to a bounded length).
    """

    name: str
    reason: str


class OutputParser(Protocol):
    def feed(self, text: str) -> list[ParsedDelta]:
        """Consume the next piece of generated text; return what is now certain."""
        ...

    def finish(self) -> list[ParsedDelta]:
        """The output ended: flush everything held back."""
        ...

    @property
    def made_tool_calls(self) -> bool:
        """True once a tool call was emitted (gateway.core.answer.Finish.made_tool_calls)."""
        ...

    @property
    def rejected_tool_calls(self) -> Sequence[RejectedToolCall]:
        """Tool-call markup kept as content so far, in output order (for the metric)."""
        ...


class ParserFactory(Protocol):
    """Builds one parser per choice of a request, from that request's tools."""

    def __call__(
        self,
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: str | Mapping[str, Any] | None,
        starts_in_reasoning: bool,
    ) -> OutputParser: ...
