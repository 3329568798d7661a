"""The OpenAI Responses request, as the gateway accepts it (validation only).

Items are checked one by one in gateway.faces.responses.convert (Codex sends them without ids,
and new item and tool kinds appear release by release); here only the envelope's types.
Unknown top-level fields are ignored, but a known field's value outside its set is a 400 that
lists the set: a typo in an effort or an include entry is never served as if it were valid.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from gateway.core.effort import OpenAIEffort


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


# OpenAI's values (the openai package's ReasoningEffort, Reasoning.summary and
# ResponseIncludable types); "none" turns reasoning off.
Effort = OpenAIEffort  # one set for chat and Responses (gateway.core.effort says where from)
Summary = Literal["auto", "concise", "detailed", "none"]
Includable = Literal[
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
]


class Reasoning(_Model):
    effort: Effort | None = None
    summary: Summary | None = None
    generate_summary: Summary | None = None  # the older name of summary


class TextFormat(_Model):
    type: Literal["text", "json_schema", "json_object"] = "text"
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
    include: list[Includable] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    service_tier: Literal["auto", "default", "flex", "priority", "scale"] | None = None
    metadata: dict[str, Any] | None = None
    stream: StrictBool = False
    user: StrictStr | None = None
