"""Typing tool-call argument values from the request's JSON schema.

Markup such as GLM's `<arg_value>V</arg_value>` carries no types: the template writes a string
raw and anything else as JSON, so `123` may be the integer 123 or the string "123". Only the
tool's schema can tell. The rules, in order:

1. `enum` / `const`: a raw text equal to a string member is that string; otherwise a JSON
   value equal to a member is that member.
2. The raw text (whitespace-stripped) parsed as JSON, kept when its JSON type is one the
   schema allows (an integral float counts as an integer, an integer as a number).
3. The raw text as a string, when the schema allows strings (unstripped: it is data).
4. Lenient spellings for allowed booleans and null (`True`, `False`, `None`).
5. Otherwise the value cannot have the schema's type: `UntypableValue` is raised and the
   caller drops that argument (a wrong type is not passed on, and no value is made up).

No schema (or a `$ref` we cannot follow) allows every type: JSON if it parses, else a string.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "null", "object", "array"})
_NO_VALUE = object()


class UntypableValue(ValueError):
    """The raw text cannot be a value of any type the schema allows."""


@dataclass(frozen=True, slots=True)
class ValueType:
    """What a schema allows: `types` None means any JSON type; `enum` None means no enum."""

    types: frozenset[str] | None
    enum: tuple[Any, ...] | None = None

    @property
    def is_plain_string(self) -> bool:
        """Only free-form strings: such a value can be streamed before it is complete."""
        return self.types == frozenset({"string"}) and self.enum is None


ANY = ValueType(types=None)


def value_type(schema: object) -> ValueType:
    """The types a (sub)schema allows, from type, type arrays, anyOf/oneOf, enum, nullable."""
    if not isinstance(schema, Mapping):
        return ANY
    enum: tuple[Any, ...] | None = None
    if "const" in schema:
        enum = (schema["const"],)
    elif isinstance(schema.get("enum"), list) and schema["enum"]:
        enum = tuple(schema["enum"])
    types = _declared_types(schema)
    if types is None and enum is not None:
        types = frozenset(json_type_of(member) for member in enum)
    if types is not None and schema.get("nullable") is True:
        types = types | {"null"}
    return ValueType(types=types, enum=enum)


def _declared_types(schema: Mapping[str, Any]) -> frozenset[str] | None:
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset({declared}) & JSON_TYPES or None
    if isinstance(declared, list):
        names = frozenset(t for t in declared if isinstance(t, str)) & JSON_TYPES
        return names or None
    for union_key in ("anyOf", "oneOf"):
        branches = schema.get(union_key)
        if isinstance(branches, list) and branches:
            union: set[str] = set()
            for branch in branches:
                branch_types = value_type(branch).types
                if branch_types is None:
                    return None
                union |= branch_types
            return frozenset(union)
    if "properties" in schema:
        return frozenset({"object"})
    if "items" in schema:
        return frozenset({"array"})
    return None


def property_schema(parameters: object, key: str) -> object:
    """The schema of one argument inside a tool's `parameters` object schema (None: unknown)."""
    if not isinstance(parameters, Mapping):
        return None
    properties = parameters.get("properties")
    if isinstance(properties, Mapping) and key in properties:
        return properties[key]
    extra = parameters.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def json_type_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def conforms(value: object, allowed: frozenset[str] | None) -> bool:
    """Whether `value`'s JSON type is one of `allowed` (None allows everything)."""
    if allowed is None:
        return True
    kind = json_type_of(value)
    if kind in allowed:
        return True
    if kind == "integer" and "number" in allowed:
        return True
    return kind == "number" and "integer" in allowed and float(value).is_integer()  # type: ignore[arg-type]


def coerce(raw: str, vt: ValueType) -> Any:
    """The typed value of the raw markup text `raw` under `vt` (rules in the module doc)."""
    if vt.enum is not None:
        if raw in vt.enum or raw.strip() in vt.enum:
            return raw if raw in vt.enum else raw.strip()
        parsed = _parse_json(raw)
        if parsed is not _NO_VALUE and any(_same(parsed, m) for m in vt.enum):
            return parsed
    parsed = _parse_json(raw)
    if parsed is not _NO_VALUE and conforms(parsed, vt.types):
        if (
            vt.types is not None
            and isinstance(parsed, float)
            and "integer" in vt.types
            and "number" not in vt.types
        ):
            return int(parsed)
        return parsed
    if vt.types is None or "string" in vt.types:
        return raw
    word = raw.strip().lower()
    if "boolean" in vt.types and word in ("true", "false"):
        return word == "true"
    if "null" in vt.types and word in ("none", "null"):
        return None
    raise UntypableValue(f"{raw[:40]!r} is not of type {', '.join(sorted(vt.types))}")


def _same(a: object, b: object) -> bool:
    return json_type_of(a) == json_type_of(b) and a == b


def _parse_json(raw: str) -> Any:
    text = raw.strip()
    if not text:
        return _NO_VALUE
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return _NO_VALUE


def _reject_constant(name: str) -> Any:
    # NaN and Infinity parse in Python but are not JSON: json.dumps would write invalid text.
    raise ValueError(name)
