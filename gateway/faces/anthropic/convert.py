"""Hop 1 of the Anthropic Messages face: a validated request -> the core request.

What each field becomes (the choices where GLM-5.3-Flash differs from Claude):
- `system` (string or text blocks) -> system messages in order; leading blocks that start with a
  configured prefix (Claude Code's per-conversation attribution block) are dropped, so the shared
  base prompt stays a shared prefix. `role: "system"` messages render where they stand.
- user content: `tool_result` blocks -> `tool` messages (first, as Anthropic requires them
  first; one whose `tool_use_id` names no `tool_use` the same, tied to no call: the rule of
  every face, docs/architecture.md "Tool results without their call"), the other blocks -> one
  user message; `document` (text sources) and `search_result`
  -> their text; images (base64 or url sources, also inside tool_result) go to the media stage
  (gateway.core.images places them where the template shows them).
- assistant content: `thinking` blocks -> `reasoning_content`, restored exactly from a
  signature of ours issued to the same key and within the request's expansion budget (else
  the visible text), `redacted_thinking` only when so restored;
  `tool_use` -> tool calls. A trailing assistant message (prefill) is refused: the model's
  template always opens a new assistant turn.
- tools: client tools -> functions (`defer_loading` kept for the template, other extra keys
  dropped); typed server tools (web_search, ...) are not the engine's to run: dropped, logged.
- `thinking`: absent, "enabled" or "adaptive" -> the model reasons (GLM always can);
  "disabled" -> the prompt closes the reasoning block empty, so the answer starts at once.
  `output_config.effort` -> the template's reasoning effort as on every face
  (gateway.core.effort: low -> Low, medium/high -> High, xhigh/max -> Max); `budget_tokens`
  has no GLM equivalent and is ignored.
- `max_tokens` is lowered to the configured ceiling, never refused for being large.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.core.bounds import allowed_expansion
from gateway.core.effort import reasoning_mode
from gateway.core.images import ImageSlots
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.core.request import CoreRequest, Sampling, SessionHints, ToolChoice
from gateway.errors import InvalidRequestError
from gateway.faces.anthropic.protocol import (
    Block,
    CountTokensRequest,
    DocumentBlock,
    ImageBlock,
    Message,
    MessagesRequest,
    RedactedThinkingBlock,
    SearchResultBlock,
    TextBlock,
    ThinkingBlock,
    ToolReferenceBlock,
    ToolResultBlock,
    ToolResultPart,
    ToolUseBlock,
)
from gateway.faces.headers import read_headers
from gateway.settings import LimitSettings, Settings

log = logging.getLogger("gateway.faces.anthropic")

API = "anthropic"


class Headers:
    """The request headers this face reads (raw ASGI names, first value wins)."""

    WANTED = (
        b"authorization",
        b"x-api-key",
        b"content-length",
        b"x-session-id",
        b"x-claude-code-session-id",
        b"x-claude-code-agent-id",
        b"x-claude-code-request-class",
        b"x-claude-code-context-compacted",
    )

    def __init__(self, scope_headers: Sequence[tuple[bytes, bytes]]) -> None:
        self._found = read_headers(scope_headers, self.WANTED)

    def get(self, name: bytes) -> str | None:
        return self._found.get(name)


def _document_text(block: DocumentBlock, where: str) -> str:
    source = block.source
    if source.get("type") == "text" and isinstance(source.get("data"), str):
        return str(source["data"])
    if source.get("type") == "content" and isinstance(source.get("content"), list):
        return "".join(
            str(part.get("text", "")) for part in source["content"] if isinstance(part, dict)
        )
    raise InvalidRequestError(
        f"{where}: only documents with a text source can be read here "
        f"(got source type {source.get('type')!r}); send the text instead.",
        param=where,
    )


def _search_text(block: SearchResultBlock) -> str:
    body = "\n".join(part.text for part in block.content)
    head = "\n".join(part for part in (block.title, block.source) if part)
    return f"{head}\n{body}" if head else body


def _text_part(block: TextBlock | DocumentBlock | SearchResultBlock, where: str) -> dict[str, str]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, DocumentBlock):
        return {"type": "text", "text": _document_text(block, where)}
    return {"type": "text", "text": _search_text(block)}


def _image_url(block: ImageBlock, where: str) -> str:
    source = block.source
    kind = source.get("type")
    if kind == "base64":
        media_type, data = source.get("media_type"), source.get("data")
        if isinstance(media_type, str) and isinstance(data, str):
            return f"data:{media_type};base64,{data}"
    elif kind == "url" and isinstance(source.get("url"), str):
        return str(source["url"])
    raise InvalidRequestError(
        f"{where}.source: an image source is {{type: base64, media_type, data}} or "
        f"{{type: url, url}} (got type {kind!r}).",
        param=f"{where}.source",
    )


class _Converter:
    def __init__(
        self, codec: ReasoningCodec, drop_system_prefixes: Sequence[str], images: ImageSlots
    ) -> None:
        self._codec = codec
        self._images = images
        self._drop = tuple(drop_system_prefixes)
        self.out: list[dict[str, Any]] = []

    def _tool_result_content(self, block: ToolResultBlock, where: str) -> Any:
        content = block.content
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        if content and all(part.type == "tool_reference" for part in content):
            # The template expands these into the referenced tools' definitions.
            return [
                {"type": "tool_reference", "name": part.tool_name}
                for part in content
                if isinstance(part, ToolReferenceBlock)
            ]
        return [self._result_part(part, f"{where}.content.{i}") for i, part in enumerate(content)]

    def _result_part(self, part: ToolResultPart, where: str) -> dict[str, str]:
        if isinstance(part, ImageBlock):
            return self._images.add(_image_url(part, where), where)
        if isinstance(part, ToolReferenceBlock):
            raise InvalidRequestError(
                f"{where}: tool_reference blocks cannot be mixed with other blocks in one "
                "tool_result; send them in a tool_result of their own.",
                param=where,
            )
        return _text_part(part, where)

    def system(self, system: str | list[TextBlock] | None) -> None:
        if system is None:
            return
        texts = [system] if isinstance(system, str) else [block.text for block in system]
        while texts and self._drop and texts[0].startswith(self._drop):
            texts.pop(0)
        self.out.extend({"role": "system", "content": text} for text in texts)

    def message(self, message: Message, index: int) -> None:
        where = f"messages.{index}.content"
        content = message.content
        if message.role == "system":
            self.out.append({"role": "system", "content": self._plain(content, where)})
        elif message.role == "user":
            self._user(content, where)
        else:
            self._assistant(content, where)

    def _plain(self, content: str | list[Block], where: str) -> Any:
        if isinstance(content, str):
            return content
        parts = []
        for i, block in enumerate(content):
            here = f"{where}.{i}"
            if isinstance(block, TextBlock | DocumentBlock | SearchResultBlock):
                parts.append(_text_part(block, here))
            elif isinstance(block, ImageBlock):
                parts.append(self._images.add(_image_url(block, here), here))
            else:
                raise InvalidRequestError(
                    f"{here}: a {block.type} block cannot appear in a system message.",
                    param=here,
                )
        return parts

    def _user(self, content: str | list[Block], where: str) -> None:
        if isinstance(content, str):
            self.out.append({"role": "user", "content": content})
            return
        rest: list[Block] = []
        for i, block in enumerate(content):
            if isinstance(block, ToolResultBlock):
                here = f"{where}.{i}"
                self.out.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.tool_use_id,
                        "content": self._tool_result_content(block, here),
                    }
                )
            elif isinstance(block, ThinkingBlock | RedactedThinkingBlock | ToolUseBlock):
                here = f"{where}.{i}"
                raise InvalidRequestError(
                    f"{here}: a {block.type} block belongs in an assistant message.", param=here
                )
            else:
                rest.append(block)
        if rest or not content:
            self.out.append({"role": "user", "content": self._plain(rest, where)})

    def _assistant(self, content: str | list[Block], where: str) -> None:
        if isinstance(content, str):
            self.out.append({"role": "assistant", "content": content})
            return
        reasoning: list[str] = []
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for i, block in enumerate(content):
            here = f"{where}.{i}"
            if isinstance(block, ThinkingBlock):
                restored = self._codec.decode(block.signature)
                reasoning.append(block.thinking if restored is None else restored)
            elif isinstance(block, RedactedThinkingBlock):
                restored = self._codec.decode(block.data)
                if restored is not None:
                    reasoning.append(restored)
                else:
                    log.debug("%s: a redacted_thinking block not made here is left out", here)
            elif isinstance(block, TextBlock):
                texts.append(block.text)
            elif isinstance(block, ToolUseBlock):
                arguments = block.input if isinstance(block.input, dict) else {"value": block.input}
                calls.append(
                    {
                        "id": block.id,
                        "type": "function",
                        "function": {"name": block.name, "arguments": arguments},
                    }
                )
            else:
                raise InvalidRequestError(
                    f"{here}: a {block.type} block cannot appear in an assistant message.",
                    param=here,
                )
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
        if calls:
            message["tool_calls"] = calls
        self.out.append(message)


def convert_messages(
    request: MessagesRequest | CountTokensRequest,
    codec: ReasoningCodec,
    settings: Settings,
    images: ImageSlots | None = None,
) -> list[dict[str, Any]]:
    """The renderer's messages; image blocks become sentinels noted in `images`."""
    slots = images if images is not None else ImageSlots()
    converter = _Converter(codec, settings.anthropic.drop_system_prefixes, slots)
    converter.system(request.system)
    for index, message in enumerate(request.messages):
        converter.message(message, index)
    if request.messages[-1].role == "assistant":
        raise InvalidRequestError(
            "The last message is from the assistant: continuing a prefilled assistant turn is "
            "not supported here; end the conversation with a user message.",
            param="messages",
        )
    return converter.out


def convert_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if "input_schema" not in tool and kind not in (None, "custom"):
            log.info("tools.%d: server tool %r dropped (the engine cannot run it)", i, kind)
            continue
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not name:
            raise InvalidRequestError(f"tools.{i}.name: a tool needs a name.", param=f"tools.{i}")
        if not isinstance(schema, dict):
            raise InvalidRequestError(
                f"tools.{i}.input_schema: a tool needs a JSON schema object.",
                param=f"tools.{i}.input_schema",
            )
        function: dict[str, Any] = {"name": name}
        description = tool.get("description")
        if isinstance(description, str):
            function["description"] = description
        function["parameters"] = schema
        if tool.get("defer_loading") is True:
            function["defer_loading"] = True  # the template lists it only once referenced
        out.append({"type": "function", "function": function})
    return out


def check_tool_references(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    sent_bytes: int,
    limits: LimitSettings,
) -> None:
    """Refuse tool_reference blocks that would render more than the request may expand to:
    each renders the whole definition of the tool it names (limits.max_expansion_ratio)."""
    if not tools:
        return
    names = [
        part.get("name")
        for message in messages
        if message["role"] == "tool" and isinstance(message["content"], list)
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == "tool_reference"
    ]
    if not names:
        return
    sizes: dict[str, int] = {}
    for tool in tools:
        function = tool["function"]
        sizes[function["name"]] = sizes.get(function["name"], 0) + len(orjson.dumps(function))
    expanded = sum(sizes.get(name, 0) for name in names if isinstance(name, str))
    allowed = allowed_expansion(sent_bytes, limits.max_expansion_ratio, limits)
    if expanded > allowed:
        raise InvalidRequestError(
            f"{len(names)} tool_reference blocks expand to {expanded} bytes of tool "
            f"definitions, more than {limits.max_expansion_ratio:g} x the request's "
            f"{sent_bytes} bytes + {limits.expansion_floor_bytes} "
            "(limits.max_expansion_ratio, limits.expansion_floor_bytes): reference each tool "
            "once.",
            param="messages",
            code="expansion_too_large",
        )


def convert_tool_choice(request: MessagesRequest | CountTokensRequest) -> ToolChoice:
    choice = request.tool_choice
    if choice is None or choice.type == "auto":
        return "auto" if request.tools else None
    if choice.type == "none":
        return "none"
    if choice.type == "any":
        return "required"
    if not choice.name:
        raise InvalidRequestError(
            "tool_choice.name: a tool_choice of type 'tool' needs the tool's name.",
            param="tool_choice.name",
        )
    return {"type": "function", "function": {"name": choice.name}}


def template_kwargs(request: MessagesRequest | CountTokensRequest) -> dict[str, Any]:
    config = request.output_config
    # Anthropic's set has no "none" (thinking.type "disabled" turns reasoning off).
    kwargs, _ = reasoning_mode(config.effort if config is not None else None)
    return kwargs


def thinking_on(request: MessagesRequest | CountTokensRequest) -> bool:
    return request.thinking is None or request.thinking.type != "disabled"


def _session_from_user_id(user_id: str | None) -> str | None:
    """Claude Code's metadata.user_id: a JSON string with session_id (since 2.1.78), or the
    older `user_<hash>_account_<id>_session_<uuid>`."""
    if not user_id:
        return None
    if user_id.startswith("{"):
        try:
            value = orjson.loads(user_id)
        except orjson.JSONDecodeError:
            return None
        session = value.get("session_id") if isinstance(value, dict) else None
        return session if isinstance(session, str) and session else None
    _, found, session = user_id.rpartition("_session_")
    return session if found and session else None


def session_hints(request: MessagesRequest, headers: Headers) -> SessionHints:
    user_id = request.metadata.user_id if request.metadata is not None else None
    header = (
        headers.get(b"x-claude-code-session-id")
        or headers.get(b"x-session-id")
        or _session_from_user_id(user_id)
    )
    body: Mapping[str, Any] = (
        {"metadata": request.metadata.model_dump()} if request.metadata else {}
    )
    compacted = (headers.get(b"x-claude-code-context-compacted") or "").strip().lower()
    return SessionHints(
        header=header,
        body=body,
        conversation=headers.get(b"x-claude-code-agent-id"),
        request_class=headers.get(b"x-claude-code-request-class"),
        compacted=compacted not in ("", "0", "false", "no"),
    )


def to_core(
    request: MessagesRequest,
    *,
    codec: ReasoningCodec,
    settings: Settings,
    headers: Headers,
    body_bytes: int,
    custom_params: Any,
) -> CoreRequest:
    config = request.output_config
    fmt = config.format if config is not None else None
    schema = None
    if fmt is not None and fmt.type == "json_schema":
        schema = orjson.dumps(fmt.schema_ or {"type": "object"}).decode()
    stops = tuple(request.stop_sequences or ())
    max_tokens = max(1, min(request.max_tokens, settings.limits.max_tokens))
    images = ImageSlots()
    messages = convert_messages(request, codec, settings, images)
    tools = convert_tools(request.tools)
    check_tool_references(messages, tools, body_bytes, settings.limits)
    return CoreRequest(
        api=API,
        model=request.model,
        messages=messages,
        tools=tools,
        tool_choice=convert_tool_choice(request),
        template_kwargs=template_kwargs(request),
        sampling=Sampling(
            max_tokens=max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k,
            stop=stops,
            json_schema=schema,
        ),
        stream=request.stream,
        session=session_hints(request, headers),
        body_bytes=body_bytes,
        thinking=thinking_on(request),
        clamp_max_tokens=True,
        custom_params=custom_params,
        images=images or None,
        parallel_tool_calls=not (
            request.tool_choice is not None and request.tool_choice.disable_parallel_tool_use
        ),
    )
