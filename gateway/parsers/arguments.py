"""Writing one tool call's arguments as JSON fragments (family-neutral).

Fragments are emitted as soon as they are certain and always concatenate to one JSON object:
`{` with the first argument, `, ` before each next one, `}` at the end (`{}` for none). A
free-form string value may be streamed piece by piece (escaping is per character, so the
pieces' escapes concatenate to the whole's); every other value is written once, typed from
the schema, or dropped when it cannot have the schema's type. A key seen twice keeps its
first value: JSON with duplicate keys means different things to different clients.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.parsers.schema_types import (
    UntypableValue,
    ValueType,
    coerce,
    property_schema,
    value_type,
)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class ArgumentsWriter:
    __slots__ = ("_keys", "_parameters")

    def __init__(self, parameters: object) -> None:
        self._parameters = parameters
        self._keys: set[str] = set()

    def value_type(self, key: str) -> ValueType:
        return value_type(property_schema(self._parameters, key))

    def accepts(self, key: str) -> bool:
        return key not in self._keys

    def _member(self, key: str) -> str:
        lead = ", " if self._keys else "{"
        self._keys.add(key)
        return f"{lead}{_json(key)}: "

    def begin_string(self, key: str) -> str:
        return self._member(key) + '"'

    @staticmethod
    def string_piece(text: str) -> str:
        return _json(text)[1:-1]

    @staticmethod
    def end_string() -> str:
        return '"'

    def whole_value(self, key: str, raw: str) -> str | None:
        """The fragment for a complete value, or None when it cannot have the schema's type."""
        try:
            value = coerce(raw, self.value_type(key))
        except UntypableValue:
            return None
        return self._member(key) + _json(value)

    def close(self) -> str:
        return "}" if self._keys else "{}"
