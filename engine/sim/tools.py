"""Tools the prompt offers, and tool-call arguments generated from their JSON schemas.

The chat template lists each tool as one JSON object per line inside a `<tools>` ... `</tools>`
block (the function object, or an OpenAI `{"type": "function", "function": ...}` wrapper).
Any line there that parses to an object with a string "name" counts as a tool.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

_TOOLS_BLOCK = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_WORDS = (
    "alpha",
    "bravo",
    "delta",
    "echo",
    "kilo",
    "lima",
    "nova",
    "orbit",
    "pixel",
    "quartz",
    "river",
    "sierra",
    "tango",
    "vector",
    "whisky",
    "zephyr",
)
MAX_SCHEMA_DEPTH = 4


@dataclass(frozen=True)
class Tool:
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


def find_tools(prompt: str) -> list[Tool]:
    """Every distinct tool listed in the prompt's tools blocks, in order of appearance."""
    if "<tools>" not in prompt:
        return []
    tools: dict[str, Tool] = {}
    for block in _TOOLS_BLOCK.findall(prompt):
        for line in block.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
                obj = obj["function"]
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                continue
            params = obj.get("parameters")
            tools.setdefault(
                obj["name"], Tool(obj["name"], params if isinstance(params, dict) else {})
            )
    return list(tools.values())


def _pick_type(schema: dict[str, Any], rng: random.Random) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        return str(rng.choice(kind))
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def _bound(schema: dict[str, Any], key: str, default: float) -> float:
    """A numeric bound of the schema, or `default` when it is absent or not a finite number."""
    value = schema.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e15:
        return float(value)
    return default


def value_for(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value that validates against the (common subset of) JSON schema."""
    if not isinstance(schema, dict):
        return rng.choice(_WORDS)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for union in ("anyOf", "oneOf"):
        branches = schema.get(union)
        if isinstance(branches, list) and branches:
            return value_for(rng.choice(branches), rng, depth)
    branches = schema.get("allOf")
    if isinstance(branches, list) and branches:
        merged: dict[str, Any] = {}
        for branch in branches:
            if isinstance(branch, dict):
                merged.update(branch)
        return value_for(merged, rng, depth)
    kind = _pick_type(schema, rng)
    if kind == "string":
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
    if kind == "integer":
        least = int(_bound(schema, "minimum", 0))
        return rng.randint(least, max(least, int(_bound(schema, "maximum", 1000))))
    if kind == "number":
        low = _bound(schema, "minimum", 0.0)
        return round(rng.uniform(low, max(low, _bound(schema, "maximum", 1000.0))), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "array":
        if depth >= MAX_SCHEMA_DEPTH:
            return []
        return [
            value_for(schema.get("items", {}), rng, depth + 1) for _ in range(rng.randint(1, 2))
        ]
    if kind == "object":
        if depth >= MAX_SCHEMA_DEPTH:
            return {}
        return arguments_for(schema, rng, depth + 1) or {"key": rng.choice(_WORDS)}
    return rng.choice(_WORDS)


def arguments_for(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """Required properties always, optional ones by coin flip; none when the schema has none."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return {}
    required = schema.get("required")
    # A client's schema may be malformed (a model only reads it): odd entries are ignored.
    required_names = (
        {n for n in required if isinstance(n, str)} if isinstance(required, list) else set()
    )
    args: dict[str, Any] = {}
    for name, prop in props.items():
        if name in required_names or rng.random() < 0.5:
            args[str(name)] = value_for(prop, rng, depth)
    return args


def render_value(value: Any) -> str:
    """Strings raw, everything else as JSON spelled as the chat template's tojson spells it
    (json.dumps defaults, non-ASCII kept), so a re-rendered turn matches the checkpoint."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def render_call(name: str, arguments: dict[str, Any]) -> str:
    parts = [f"<tool_call>{name}"]
    for key, value in arguments.items():
        parts.append(f"<arg_key>{key}</arg_key><arg_value>{render_value(value)}</arg_value>")
    parts.append("</tool_call>")
    return "".join(parts)
