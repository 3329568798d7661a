"""The parser used when no family parser is installed: all generated text is content."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.parsers.base import ContentDelta, ParsedDelta, RejectedToolCall


class PassthroughParser:
    def feed(self, text: str) -> list[ParsedDelta]:
        return [ContentDelta(text)] if text else []

    def finish(self) -> list[ParsedDelta]:
        return []

    @property
    def made_tool_calls(self) -> bool:
        return False

    @property
    def rejected_tool_calls(self) -> Sequence[RejectedToolCall]:
        return ()


def passthrough_factory(
    *,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: str | Mapping[str, Any] | None,
    starts_in_reasoning: bool,
) -> PassthroughParser:
    return PassthroughParser()
