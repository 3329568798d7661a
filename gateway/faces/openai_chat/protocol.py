"""The OpenAI chat-completions request, as the gateway accepts it.

Validation is the only job here: the chat route keeps the client's own message and tool dicts
(what the renderer takes, like transformers' apply_chat_template) and uses this model to know
they have the right shape. Unknown top-level fields are ignored, as OpenAI-compatible servers
do, so newer clients keep working.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    field_validator,
    model_validator,
)

from gateway.core.effort import OpenAIEffort


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class TextPart(_Model):
    type: Literal["text"]
    text: StrictStr


class ImageUrl(_Model):
    url: StrictStr
    detail: StrictStr | None = None  # accepted and ignored: the engine sizes images itself


class ImageUrlPart(_Model):
    """OpenAI's image part: `image_url` as an object or a bare string."""

    type: Literal["image_url"]
    image_url: StrictStr | ImageUrl

    @property
    def url(self) -> str:
        return self.image_url if isinstance(self.image_url, str) else self.image_url.url


class ImagePart(_Model):
    """The model card's form: {"type": "image", "url": ...} (or "image": ...)."""

    type: Literal["image"]
    url: StrictStr | None = None
    image: StrictStr | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImagePart:
        if not (self.url or self.image):
            raise ValueError("an 'image' part needs 'url' (or 'image'): a URL or a data: URL")
        return self

    @property
    def source(self) -> str:
        return self.url or self.image or ""


IMAGE_PARTS = frozenset({"image_url", "image"})
# Parts the engine cannot take (it bounds no clip's cost) or the template would drop: a 400
# naming them, never a part silently lost.
_UNSUPPORTED_PARTS = frozenset(
    {"input_audio", "audio", "audio_url", "file", "video", "video_url", "input_file"}
)
# Other part types the template renders (a tool_reference result lists the named tools).
_PASSED_PARTS = frozenset({"tool_reference"})


class OtherPart(_Model):
    """Parts the template understands besides text and images (tool_reference); passed through."""

    type: StrictStr

    @field_validator("type")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value == "text":
            raise ValueError("a text part needs a string 'text' field")
        if value in IMAGE_PARTS:
            raise ValueError(f"an {value!r} part needs its image: a URL or a data: URL")
        if value in _UNSUPPORTED_PARTS:
            raise ValueError(
                f"content parts of type {value!r} are not supported: this server takes text "
                "and images"
            )
        if value not in _PASSED_PARTS:
            raise ValueError(f"content parts of type {value!r} are not known here")
        return value


ContentPart = TextPart | ImageUrlPart | ImagePart | OtherPart
Content = StrictStr | list[ContentPart] | None


class FunctionCall(_Model):
    name: StrictStr
    # OpenAI clients send a JSON string; the template parses it into a mapping.
    arguments: StrictStr | dict[str, Any] = "{}"


class ToolCall(_Model):
    id: StrictStr | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Content = None
    name: StrictStr | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: StrictStr | None = None
    reasoning_content: StrictStr | None = None


class FunctionDefinition(_Model):
    name: StrictStr
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class Tool(_Model):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Model):
    name: StrictStr


class NamedToolChoice(_Model):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Model):
    include_usage: StrictBool = False


class JsonSchemaFormat(_Model):
    name: StrictStr = "response"
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: StrictBool | None = None


class ResponseFormat(_Model):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class ChatCompletionRequest(_Model):
    model: StrictStr
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    # The engine's own ranges (sglang-kt's SamplingParams.verify): checked here because the
    # engine keeps the state of every request it refuses (docs/engine-cpu.md).
    top_k: int | None = None
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=2.0)
    stop: StrictStr | list[StrictStr] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    n: int = Field(default=1, ge=1)
    response_format: ResponseFormat | None = None
    # OpenAI's published set (gateway.core.effort), "none" included: reasoning off.
    reasoning_effort: OpenAIEffort | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    user: StrictStr | None = None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def requested_max_tokens(self) -> int | None:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, value: int | None) -> int | None:
        if value is not None and value != -1 and value < 1:
            raise ValueError("top_k must be -1 (no limit) or at least 1")
        return value
