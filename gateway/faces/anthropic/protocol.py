"""The Anthropic Messages request, as the gateway accepts it (validation only).

Tolerant where Claude Code varies from release to release: unknown fields, `cache_control`
anywhere, new tool keys and `anthropic-beta` values are accepted and ignored. Strict where a
wrong value would change what the model sees: block types the gateway cannot render get a 400
naming them instead of being dropped.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class TextBlock(_Model):
    type: Literal["text"]
    text: StrictStr


class ImageBlock(_Model):
    type: Literal["image"]
    source: dict[str, Any]


class DocumentBlock(_Model):
    type: Literal["document"]
    source: dict[str, Any]
    title: StrictStr | None = None


class SearchResultBlock(_Model):
    type: Literal["search_result"]
    source: StrictStr = ""
    title: StrictStr = ""
    content: list[TextBlock] = Field(default_factory=list)


class ToolReferenceBlock(_Model):
    type: Literal["tool_reference"]
    tool_name: StrictStr


class ThinkingBlock(_Model):
    type: Literal["thinking"]
    thinking: StrictStr = ""
    signature: StrictStr | None = None


class RedactedThinkingBlock(_Model):
    type: Literal["redacted_thinking"]
    data: StrictStr


class ToolUseBlock(_Model):
    type: Literal["tool_use"]
    id: StrictStr
    name: StrictStr
    # An object; other JSON is accepted on input (models have emitted arrays) and wrapped.
    input: Any = Field(default_factory=dict)


ToolResultPart = Annotated[
    TextBlock | ImageBlock | DocumentBlock | SearchResultBlock | ToolReferenceBlock,
    Field(discriminator="type"),
]


class ToolResultBlock(_Model):
    type: Literal["tool_result"]
    tool_use_id: StrictStr
    content: StrictStr | list[ToolResultPart] | None = None
    is_error: StrictBool | None = None


Block = Annotated[
    TextBlock
    | ImageBlock
    | DocumentBlock
    | SearchResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ToolUseBlock
    | ToolResultBlock,
    Field(discriminator="type"),
]


class Message(_Model):
    role: Literal["user", "assistant", "system"]
    content: StrictStr | list[Block]


class ToolChoice(_Model):
    type: Literal["auto", "any", "tool", "none"]
    name: StrictStr | None = None
    disable_parallel_tool_use: StrictBool | None = None


class Thinking(_Model):
    # Anything but "disabled" lets the model reason. A value outside these is a 400 that lists
    # them (a typo is never served as if valid); "between_tools" is what the pinned SDK knows
    # beyond the documented three.
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: int | None = None
    # How the client shows thinking: "summarized" (the default), "omitted" (signature only),
    # or what clients send beyond the documented two (Claude Code 2.1.332 sends "updates" in
    # stream-json mode). It changes nothing the engine does, so any string is served: a 400
    # here broke a real client (tests/e2e/test_cli_sessions.py).
    display: StrictStr | None = None


class OutputFormat(_Model):
    type: Literal["json_schema"]
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")


class OutputConfig(_Model):
    # The values Claude Code's own effort setting offers.
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


class Metadata(_Model):
    user_id: StrictStr | None = None


class MessagesRequest(_Model):
    model: StrictStr
    messages: list[Message] = Field(min_length=1)
    max_tokens: int = Field(ge=0)
    system: StrictStr | list[TextBlock] | None = None
    # Client tools and typed server tools; gateway.faces.anthropic.convert sorts them.
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    stop_sequences: list[StrictStr] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    # sglang-kt refuses top_k 0 (and keeps the refused request's state): at least 1 here.
    top_k: int | None = Field(default=None, ge=1)
    metadata: Metadata | None = None
    stream: StrictBool = False


class CountTokensRequest(_Model):
    """count_tokens takes the same body without max_tokens and stream."""

    model: StrictStr
    messages: list[Message] = Field(min_length=1)
    system: StrictStr | list[TextBlock] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
