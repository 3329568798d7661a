"""Hop 1 of the Responses face: input items and tools -> the core request's messages and tools.

What each becomes (the choices where GLM-5.3-Flash differs from OpenAI's models):
- `instructions` -> a system message first; `system` and `developer` messages -> system
  messages where they stand (the template renders no `developer` role: it would be lost).
- an assistant turn is the run of `reasoning`, assistant `message`, `function_call` and
  `custom_tool_call` items between other items -> one assistant message; a `reasoning` item's
  `encrypted_content` of ours restores the exact reasoning (else its `content` text, else its
  summary text); `function_call_output` / `custom_tool_call_output` -> tool messages.
- an output that answers a call the conversation does not show (no `call_id`, as Codex sends
  its goal tool's output after compaction, or a `call_id` no call has) is a tool message all
  the same, with its `call_id` when it has one: the rule of every face (docs/architecture.md,
  "Tool results without their call"), never a 400.
- `item_reference` items are resolved from the store by the route before they get here.
- `web_search_call` and other hosted-tool history items are left out (logged): the engine runs
  no such tools, and their results are in the messages that follow.
- tools: `function` as is; `namespace` groups flattened to unique function names for the model
  (`ToolNames` restores `{namespace, name}` on output and accepts either form back); `custom`
  tools -> a function with one string argument `input` (its grammar in the description);
  kinds the engine cannot serve (web_search, ...) dropped with a log line.
- `reasoning.effort` -> the template's effort as on every face (gateway.core.effort:
  minimal/low -> Low, medium/high -> High, xhigh/max -> Max; "none" turns reasoning off).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.core.effort import reasoning_mode
from gateway.core.images import ImageSlots
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.core.request import ToolChoice
from gateway.errors import InvalidRequestError

log = logging.getLogger("gateway.faces.responses")

_CUSTOM_ARGUMENT = "input"
# History items of hosted tools the engine cannot run (their tools are dropped the same way).
_SERVER_TOOL_ITEMS = frozenset(
    {"web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call"}
)


@dataclass
class ToolNames:
    """The names the model sees -> what the client knows them as."""

    # flat name -> (namespace, name)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    custom: set[str] = field(default_factory=set)

    def flat(self, name: str, namespace: str | None) -> str:
        if not namespace:
            return name
        return flat_name(namespace, name)

    def client(self, flat: str) -> tuple[str | None, str]:
        """(namespace, name) for a name the model wrote."""
        found = self.namespaced.get(flat)
        return found if found is not None else (None, flat)


def flat_name(namespace: str, name: str) -> str:
    # Codex's MCP namespaces end in "__" ("mcp__docs__"): joined as they are; others get "__".
    return namespace + name if namespace.endswith(("_", ".", ":", "/")) else f"{namespace}__{name}"


def _bad(where: str, text: str) -> InvalidRequestError:
    return InvalidRequestError(f"{where}: {text}", param=where)


def convert_tools(
    tools: list[dict[str, Any]] | None,
) -> tuple[list[dict[str, Any]] | None, ToolNames]:
    names = ToolNames()
    if tools is None:
        return None, names
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind == "function":
            out.append(_function(tool, f"tools.{i}", tool.get("name")))
        elif kind == "namespace":
            namespace = tool.get("name")
            members = tool.get("tools")
            if not isinstance(namespace, str) or not namespace or not isinstance(members, list):
                raise _bad(f"tools.{i}", "a namespace tool needs a name and a list of tools.")
            for j, member in enumerate(members):
                where = f"tools.{i}.tools.{j}"
                if not isinstance(member, dict) or member.get("type", "function") != "function":
                    log.info("%s: a %r tool inside a namespace is dropped", where, member)
                    continue
                member_name = member.get("name")
                if not isinstance(member_name, str) or not member_name:
                    raise _bad(where, "a tool needs a name.")
                flat = flat_name(namespace, member_name)
                names.namespaced[flat] = (namespace, member_name)
                out.append(_function(member, where, flat))
        elif kind == "custom":
            name = tool.get("name")
            if not isinstance(name, str) or not name:
                raise _bad(f"tools.{i}", "a custom tool needs a name.")
            names.custom.add(name)
            out.append(_custom(tool, name))
        else:
            log.info("tools.%d: a %r tool is dropped (the engine cannot run it)", i, kind)
    return out, names


def _function(tool: dict[str, Any], where: str, name: object) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise _bad(where, "a function tool needs a name.")
    function: dict[str, Any] = {"name": name}
    description = tool.get("description")
    if isinstance(description, str):
        function["description"] = description
    parameters = tool.get("parameters")
    function["parameters"] = parameters if isinstance(parameters, dict) else {"type": "object"}
    return {"type": "function", "function": function}


def _custom(tool: dict[str, Any], name: str) -> dict[str, Any]:
    description = str(tool.get("description") or "")
    fmt = tool.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        description += (
            f"\nThe `{_CUSTOM_ARGUMENT}` argument is free-form text in this "
            f"{fmt.get('syntax', '')} grammar:\n{fmt.get('definition', '')}"
        )
    parameters = {
        "type": "object",
        "properties": {_CUSTOM_ARGUMENT: {"type": "string"}},
        "required": [_CUSTOM_ARGUMENT],
    }
    return {
        "type": "function",
        "function": {"name": name, "description": description.strip(), "parameters": parameters},
    }


def custom_input(arguments: str) -> str:
    """A custom tool call's raw input, from the function arguments the model wrote."""
    try:
        value = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(_CUSTOM_ARGUMENT), str):
        return str(value[_CUSTOM_ARGUMENT])
    return arguments


def convert_tool_choice(choice: str | dict[str, Any] | None, names: ToolNames) -> ToolChoice:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict):
        kind = choice.get("type")
        name = choice.get("name")
        if kind in ("function", "custom") and isinstance(name, str) and name:
            flat = names.flat(name, choice.get("namespace"))
            return {"type": "function", "function": {"name": flat}}
        if kind == "allowed_tools":
            mode = choice.get("mode")
            return "required" if mode == "required" else "auto"
    raise _bad("tool_choice", "use 'auto', 'none', 'required' or {'type': 'function', 'name'}.")


def effort(reasoning_effort: str | None) -> tuple[dict[str, Any], bool]:
    """(template kwargs, reasoning on): the one mapping every face uses."""
    return reasoning_mode(reasoning_effort)


def _text_of(content: Any, where: str, images: ImageSlots) -> Any:
    """A message's or an output's content: a string, or text (and image) parts for the
    template; images go to the media stage through `images`."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise _bad(where, "content must be a string or a list of parts.")
    parts = []
    for i, part in enumerate(content):
        here = f"{where}.{i}"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise _bad(
                    here,
                    "an input_image part needs image_url (a URL or a data: URL); file_id "
                    "uploads are not stored here.",
                )
            parts.append(images.add(url, here))
        elif kind in ("input_file", "input_audio"):
            raise _bad(here, f"{kind} parts are not supported: this server takes text and images.")
        else:
            raise _bad(here, f"a content part of type {kind!r} cannot be read here.")
    return parts


def _joined(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content)


class _Converter:
    def __init__(self, codec: ReasoningCodec, names: ToolNames, images: ImageSlots) -> None:
        self.images = images
        self._codec = codec
        self._names = names
        self.out: list[dict[str, Any]] = []
        self._turn: dict[str, Any] | None = None  # the assistant turn being gathered

    def _assistant(self) -> dict[str, Any]:
        if self._turn is None:
            self._turn = {"role": "assistant", "content": ""}
            self.out.append(self._turn)
        return self._turn

    def item(self, item: Any, where: str) -> None:
        if not isinstance(item, dict):
            raise _bad(where, "an input item must be an object.")
        kind = item.get("type", "message" if "role" in item else None)
        if kind is not None and not isinstance(kind, str):
            raise _bad(f"{where}.type", "an input item's type must be a string.")
        if kind == "message":
            self._message(item, where)
        elif kind == "reasoning":
            turn = self._turn
            if turn is not None and (turn["content"] or turn.get("tool_calls")):
                self._turn = None  # reasoning opens a new turn: GLM reasons first
            turn = self._assistant()
            turn["reasoning_content"] = turn.get("reasoning_content", "") + self._reasoning(item)
        elif kind in ("function_call", "custom_tool_call"):
            self._call(item, kind, where)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self._turn = None
            call_id = item.get("call_id")
            if call_id is not None and not isinstance(call_id, str):
                raise _bad(f"{where}.call_id", "a call_id must be a string.")
            content = _text_of(item.get("output"), f"{where}.output", self.images)
            tool: dict[str, Any] = {"role": "tool", "content": content}
            if call_id:  # none: an output tied to no call (the module's docstring)
                tool["tool_call_id"] = call_id
            self.out.append(tool)
        elif kind in _SERVER_TOOL_ITEMS:
            # The record of a tool the engine cannot run (its tools are dropped too), from a
            # history that began elsewhere: its results are in the messages that follow.
            log.info("%s: a %s item is left out of the prompt", where, kind)
        elif kind == "item_reference":
            # The route resolves them from the store (route._referenced) before conversion.
            raise _bad(where, f"the item_reference {item.get('id')!r} was not resolved.")
        else:
            raise _bad(where, f"input items of type {kind!r} are not supported here.")

    def _message(self, item: dict[str, Any], where: str) -> None:
        role = item.get("role")
        content = _text_of(item.get("content"), f"{where}.content", self.images)
        if role == "assistant":
            turn = self._assistant()
            turn["content"] += _joined(content)
            return
        self._turn = None
        if role in ("system", "developer"):
            self.out.append({"role": "system", "content": content})
        elif role == "user":
            self.out.append({"role": "user", "content": content})
        else:
            raise _bad(f"{where}.role", f"role {role!r} is not one of user, assistant, system.")

    def _reasoning(self, item: dict[str, Any]) -> str:
        restored = self._codec.decode(item.get("encrypted_content"))
        if restored is not None:
            return restored
        for key in ("content", "summary"):
            parts = item.get(key)
            if isinstance(parts, list) and parts:
                return "".join(
                    str(part.get("text", "")) for part in parts if isinstance(part, dict)
                )
        return ""

    def _call(self, item: dict[str, Any], kind: str, where: str) -> None:
        name, call_id = item.get("name"), item.get("call_id")
        if not isinstance(name, str) or not name or not isinstance(call_id, str) or not call_id:
            raise _bad(where, f"a {kind} item needs a name and a call_id.")
        if kind == "custom_tool_call":
            arguments: Any = {_CUSTOM_ARGUMENT: str(item.get("input", ""))}
        else:
            raw = item.get("arguments", "{}")
            arguments = raw if isinstance(raw, str | dict) else "{}"
            namespace = item.get("namespace")
            name = self._names.flat(name, namespace if isinstance(namespace, str) else None)
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        turn = self._assistant()
        turn.setdefault("tool_calls", []).append(call)


def convert_input(
    instructions: str | None,
    items: str | list[Any],
    codec: ReasoningCodec,
    names: ToolNames,
    images: ImageSlots | None = None,
) -> list[dict[str, Any]]:
    """The renderer's messages; input_image parts become sentinels noted in `images`."""
    converter = _Converter(codec, names, images if images is not None else ImageSlots())
    if instructions:
        converter.out.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        converter.out.append({"role": "user", "content": items})
        return converter.out
    for index, item in enumerate(items):
        converter.item(item, f"input.{index}")
    if not converter.out:
        raise _bad("input", "the request has no input: send a string or a list of items.")
    return converter.out
