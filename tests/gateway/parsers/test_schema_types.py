"""Typing raw markup text from a JSON schema (rules in gateway/parsers/schema_types.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.parsers.schema_types import (
    ANY,
    UntypableValue,
    coerce,
    property_schema,
    value_type,
)


@pytest.mark.parametrize(
    ("schema", "raw", "expected"),
    [
        ({"type": "string"}, "123", "123"),
        ({"type": "string"}, " padded ", " padded "),
        ({"type": "integer"}, "123", 123),
        ({"type": "integer"}, " 7\n", 7),
        ({"type": "integer"}, "5.0", 5),
        ({"type": "number"}, "5", 5),
        ({"type": "number"}, "2.5", 2.5),
        ({"type": "boolean"}, "true", True),
        ({"type": "boolean"}, "False", False),
        ({"type": "null"}, "None", None),
        ({"type": ["integer", "null"]}, "null", None),
        ({"type": ["integer", "string"]}, "42", 42),
        ({"type": ["integer", "string"]}, "forty-two", "forty-two"),
        ({"type": "string", "nullable": True}, "null", None),
        ({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, "true", True),
        ({"oneOf": [{"type": "array"}, {"type": "null"}]}, "[1, 2]", [1, 2]),
        ({"type": "object"}, '{"a": {"b": [1]}}', {"a": {"b": [1]}}),
        ({"properties": {"a": {}}}, '{"a": 1}', {"a": 1}),
        ({"items": {"type": "string"}}, '["x"]', ["x"]),
        ({"enum": ["a", "1"]}, "1", "1"),
        ({"enum": ["a", 1]}, "1", 1),
        ({"const": "fixed"}, "fixed", "fixed"),
        ({"type": "string", "enum": ["x", "y"]}, "z", "z"),
        (None, "123", 123),
        (None, "{not json", "{not json"),
        ({"$ref": "#/$defs/thing"}, '{"a": 1}', {"a": 1}),
        ({"type": "object"}, '"{\\"a\\": 1}"', UntypableValue),
        ({"type": "integer"}, "many", UntypableValue),
        ({"type": "number"}, "NaN", UntypableValue),
        ({"type": "array"}, "", UntypableValue),
    ],
)
def test_coerce(schema: Any, raw: str, expected: Any) -> None:
    vt = value_type(schema)
    if expected is UntypableValue:
        with pytest.raises(UntypableValue):
            coerce(raw, vt)
        return
    result = coerce(raw, vt)
    assert result == expected
    assert type(result) is type(expected)


def test_only_plain_strings_stream() -> None:
    assert value_type({"type": "string"}).is_plain_string
    assert not value_type({"type": "string", "enum": ["a"]}).is_plain_string
    assert not value_type({"type": ["string", "null"]}).is_plain_string
    assert not value_type(None).is_plain_string


def test_property_schema_lookup() -> None:
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": {"type": "boolean"},
    }
    assert property_schema(parameters, "a") == {"type": "integer"}
    assert property_schema(parameters, "other") == {"type": "boolean"}
    assert property_schema({"type": "object"}, "a") is None
    assert value_type(property_schema(None, "a")) == ANY


def test_degenerate_schemas_allow_anything() -> None:
    schemas: list[object] = [{"enum": []}, {"type": "x"}, {"type": []}, {"anyOf": [{}, 1]}, "x"]
    for schema in schemas:
        assert value_type(schema).types is None, schema
