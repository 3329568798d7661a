"""The grammar that forces GLM tool calls (tool_choice "required" or a named function).

Written in llguidance's Lark dialect and sent as `sampling_params.ebnf` (see constraints.py
for why). The grammar covers what follows `</think>`: one or more calls (exactly one for a
named function), nothing else. Arguments follow the schema's property order, required ones
mandatory; a value is typed as far as a grammar can do it safely:

The markup (`<tool_call>`, `<arg_key>`, ...) is written as tokens (`<tool_call>` unquoted),
not as quoted text: the model's tokenizer has each marker as one added token, and llguidance
treats every added token as a special token that no quoted text matches. A grammar with the
markers as text forbids the very token the model emits for them; the real engine showed it
(tests/e2e/test_engine_protocol.py): the matcher failed at the first `<tool_call>` and the
"forced" call came back as plain text.

- free text (strings, unions that include strings, untyped values): any text up to the
  `</arg_value>` token, which is exactly what the parser reads as the value;
- enums: one of the members as the template writes them (strings raw, others as JSON);
- everything else: `%json{...}` with only the JSON types (or the enum), never the request's
  own schema keywords, so an unusual schema can never make the grammar invalid.

A tool without declared properties takes any number of arguments with free-text values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.parsers.constraints import DecodingConstraint
from gateway.parsers.glm_markup import (
    CALL_CLOSE,
    CALL_OPEN,
    KEY_CLOSE,
    KEY_OPEN,
    VALUE_CLOSE,
    VALUE_OPEN,
)
from gateway.parsers.schema_types import ValueType, value_type
from gateway.parsers.tools import declared_functions, resolve_tool_choice

# Any text: it ends where the model emits the `</arg_value>` token (no text lexeme can hold
# a special token, so the lexer never has to guess where free text stops).
_FREE_TEXT = r"/(?s:.*)/"
_FREE_KEY = r"/[^<\n]+/"


@dataclass(frozen=True, slots=True)
class GlmLayout:
    """Separators of one GLM markup variant (GLM-4.7/5.x: none; GLM-4.5/4.6: newlines)."""

    after_name: str = ""
    after_key: str = ""
    after_value: str = ""
    between_calls: str = ""


GLM47_LAYOUT = GlmLayout()
GLM45_LAYOUT = GlmLayout(after_name="\n", after_key="\n", after_value="\n", between_calls="\n")


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _literals(*texts: str) -> str:
    """Grammar items for fixed texts, skipping empty separators."""
    return " ".join(_literal(t) for t in texts if t)


def _token(marker: str) -> str:
    """A markup marker as the single token it is in the model's vocabulary."""
    return marker


def _value_rule(vt: ValueType) -> str:
    """Grammar for `V</arg_value>` of one argument."""
    if vt.enum:
        # Each member as the template writes it: a string raw, anything else as JSON.
        written = (m if isinstance(m, str) else json.dumps(m, ensure_ascii=False) for m in vt.enum)
        members = " | ".join(_literal(w) for w in dict.fromkeys(written))
        return f"({members}) {_token(VALUE_CLOSE)}"
    if vt.types is None or "string" in vt.types:
        return f"FREE_TEXT {_token(VALUE_CLOSE)}"
    kinds = sorted(vt.types)
    schema = {"type": kinds[0] if len(kinds) == 1 else kinds}
    return f"%json{json.dumps(schema)} {_token(VALUE_CLOSE)}"


def _argument(key_item: str, value_item: str, layout: GlmLayout) -> str:
    parts = [
        _token(KEY_OPEN),
        key_item,
        _token(KEY_CLOSE),
        _literals(layout.after_key),
        _token(VALUE_OPEN),
        value_item,
        _literals(layout.after_value),
    ]
    return " ".join(p for p in parts if p)


def _call_rules(index: int, name: str, parameters: object, layout: GlmLayout) -> list[str]:
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    required = parameters.get("required") if isinstance(parameters, Mapping) else None
    required_keys = set(required) if isinstance(required, list) else set()
    rules: list[str] = []
    body: list[str] = []
    if isinstance(properties, Mapping):
        for number, (key, schema) in enumerate(properties.items()):
            arg_rule = f"arg_{index}_{number}"
            value = _value_rule(value_type(schema))
            rules.append(f"{arg_rule}: {_argument(_literal(str(key)), value, layout)}")
            body.append(arg_rule if key in required_keys else f"{arg_rule}?")
    else:
        body.append("arg_free*")
    head = " ".join(p for p in (_token(CALL_OPEN), _literals(name, layout.after_name)) if p)
    rules.insert(0, f"call_{index}: {' '.join([head, *body, _token(CALL_CLOSE)])}")
    return rules


def glm_tool_call_grammar(
    functions: Mapping[str, object], names: Sequence[str], layout: GlmLayout, *, single: bool
) -> str:
    """Lark grammar: calls to `names` only; exactly one call when `single`."""
    rules: list[str] = []
    for index, name in enumerate(names):
        rules.extend(_call_rules(index, name, functions.get(name), layout))
    sep = _literals(layout.between_calls)
    if single:
        start = "start: tool_call"
    else:
        start = f"start: tool_call ({sep} tool_call)*" if sep else "start: tool_call+"
    return "\n".join(
        [
            start,
            "tool_call: " + " | ".join(f"call_{i}" for i in range(len(names))),
            *rules,
            f"arg_free: {_argument('FREE_KEY', f'FREE_TEXT {_token(VALUE_CLOSE)}', layout)}",
            f"FREE_TEXT: {_FREE_TEXT}",
            f"FREE_KEY: {_FREE_KEY}",
            "",
        ]
    )


class GlmConstraintBuilder:
    """`DecodingConstraintBuilder` for GLM markup in one layout."""

    def __init__(self, layout: GlmLayout) -> None:
        self._layout = layout

    def __call__(
        self,
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: str | Mapping[str, Any] | None,
        starts_in_reasoning: bool,
        parallel_tool_calls: bool = True,
    ) -> DecodingConstraint:
        choice = resolve_tool_choice(tools, tool_choice)
        if choice.mode not in ("required", "function"):
            if parallel_tool_calls or choice.mode == "none" or not tools:
                return DecodingConstraint()
            # One call at most: the engine stops where the first call closes.
            return DecodingConstraint(kept_stop=CALL_CLOSE)
        functions = declared_functions(tools)
        names = [choice.name] if choice.name is not None else list(functions)
        single = choice.mode == "function" or not parallel_tool_calls
        grammar = glm_tool_call_grammar(functions, names, self._layout, single=single)
        fields = {"require_reasoning": True} if starts_in_reasoning else {}
        return DecodingConstraint(sampling_params={"ebnf": grammar}, request_fields=fields)
