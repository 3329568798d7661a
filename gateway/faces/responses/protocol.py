"""The OpenAI Responses request, as the gateway accepts it (validation only).

Items are checked one by one in gateway.faces.responses.convert (Codex sends them without ids,
and new item and tool kinds appear release by release); here only the envelope's types.
Unknown top-level fields are ignored.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Reasoning(_Model):
    effort: StrictStr | None = None
    summary: StrictStr | None = None


class TextFormat(_Model):
    type: StrictStr = "text"
    name: StrictStr | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: StrictBool | None = None


class Text(_Model):
    format: TextFormat | None = None


class ResponsesRequest(_Model):
    model: StrictStr
    input: StrictStr | list[dict[str, Any]] = Field(default_factory=list)
    instructions: StrictStr | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    reasoning: Reasoning | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    text: Text | None = None
    prompt_cache_key: StrictStr | None = None
    store: StrictBool = True
    previous_response_id: StrictStr | None = None
    include: list[StrictStr] | None = None
    metadata: dict[str, Any] | None = None
    stream: StrictBool = False
    user: StrictStr | None = None
