"""A minimal GLM-format renderer, used only until gateway.render provides build_renderer.

It covers system/user/assistant/tool turns and the generation prompt; the real renderer
(the verified fast template) replaces it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from gateway.errors import TemplateInputError

_TEMPLATE = (
    "[gMASK]<sop><|system|>Reasoning Effort: {{ effort }}"
    "{% if tools %}<|system|># Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|observation|><tool_response>{{ m.text }}</tool_response>"
    "{% elif m.role == 'assistant' %}<|assistant|><think>{{ m.reasoning }}</think>{{ m.text }}"
    "{% for c in m.calls %}<tool_call>{{ c }}</tool_call>{% endfor %}"
    "{% else %}<|{{ m.role }}|>{{ m.text }}{% endif %}"
    "{% endfor %}<|assistant|><think>"
)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, Mapping):
            value = part.get("text", part.get("output", ""))
            parts.append(value if isinstance(value, str) else json.dumps(value))
    return "".join(parts)


class FallbackRenderer:
    def __init__(self) -> None:
        env = ImmutableSandboxedEnvironment()
        env.policies["json.dumps_kwargs"] = {"ensure_ascii": False}
        self._template = env.from_string(_TEMPLATE)

    @property
    def name(self) -> str:
        return "fallback"

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        template_kwargs: Mapping[str, Any],
    ) -> str:
        turns = []
        for message in messages:
            role = message.get("role")
            if role == "developer":
                role = "system"
            calls = [
                (call.get("function") or {}).get("name", "")
                for call in message.get("tool_calls") or []
            ]
            turns.append(
                {
                    "role": role,
                    "text": _text(message.get("content")).strip()
                    if role == "assistant"
                    else _text(message.get("content")),
                    "reasoning": message.get("reasoning_content") or "",
                    "calls": calls,
                }
            )
        effort = {"low": "Low", "high": "High"}.get(
            str(template_kwargs.get("reasoning_effort")), "Max"
        )
        try:
            return self._template.render(
                messages=turns,
                tools=[tool.get("function", tool) for tool in tools or []],
                effort=effort,
            )
        except TemplateError as exc:
            raise TemplateInputError(f"The conversation could not be rendered: {exc}") from exc
