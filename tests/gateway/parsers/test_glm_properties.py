"""Properties: streaming equals one-shot for every split; arguments are typed JSON objects."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.parsers.schema_types import conforms, property_schema, value_type
from gateway.parsers.stream_core import ParserLimits
from gateway.parsers.tools import declared_functions
from tests.gateway.parsers.strategies import NOISY_OUTPUT, Expected, well_formed_output
from tests.gateway.parsers.support import (
    TOOLS,
    Assembled,
    canonical,
    make_parser,
    parse_chunks,
    split_at,
)

SCHEMAS = declared_functions(TOOLS)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOAK = settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _splits(text: str, data: st.DataObject) -> list[list[str]]:
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=len(text)))
    return [[text], list(text), split_at(text, cuts)]


# Small enough that generated names, keys and values cross them: the bounded paths must
# stream exactly like one-shot too.
TINY = ParserLimits(max_name_chars=6, max_key_chars=4, max_value_chars=8)


def _results(
    text: str, data: st.DataObject, *, starts_in_reasoning: bool, limits: ParserLimits | None = None
) -> list[Assembled]:
    results = []
    rejected = []
    for chunks in _splits(text, data):
        parser = make_parser(starts_in_reasoning=starts_in_reasoning, limits=limits)
        results.append(parse_chunks(chunks, parser))
        rejected.append(parser.rejected_tool_calls)
    assert all(r == rejected[0] for r in rejected)
    return results


def _check_identical_and_typed(
    text: str, data: st.DataObject, starts: bool, limits: ParserLimits | None
) -> None:
    one_shot, *streamed = _results(text, data, starts_in_reasoning=starts, limits=limits)
    for result in streamed:
        assert result == one_shot
    for (_, name, arguments), decoded in zip(one_shot.calls, one_shot.arguments(), strict=True):
        assert isinstance(decoded, dict), arguments
        for key, value in decoded.items():
            schema = property_schema(SCHEMAS[name], key)
            assert conforms(value, value_type(schema).types), (name, key, value)


def _check_round_trip(expected: Expected, data: st.DataObject) -> None:
    for result in _results(expected.text, data, starts_in_reasoning=True):
        assert result.reasoning == expected.reasoning
        assert result.content == expected.content
        assert [name for _, name, _ in result.calls] == [name for name, _ in expected.calls]
        assert [canonical(a) for a in result.arguments()] == [
            canonical(a) for _, a in expected.calls
        ]


@FAST
@given(NOISY_OUTPUT, st.booleans(), st.sampled_from([None, TINY]), st.data())
def test_any_output_streams_exactly_like_one_shot(
    text: str, starts: bool, limits: ParserLimits | None, data: st.DataObject
) -> None:
    _check_identical_and_typed(text, data, starts, limits)


@FAST
@given(well_formed_output(), st.data())
def test_well_formed_output_round_trips(expected: Expected, data: st.DataObject) -> None:
    _check_round_trip(expected, data)


@pytest.mark.slow
@SOAK
@given(NOISY_OUTPUT, st.booleans(), st.sampled_from([None, TINY]), st.data())
def test_any_output_streams_exactly_like_one_shot_soak(
    text: str, starts: bool, limits: ParserLimits | None, data: st.DataObject
) -> None:
    _check_identical_and_typed(text, data, starts, limits)


@pytest.mark.slow
@SOAK
@given(well_formed_output(), st.data())
def test_well_formed_output_round_trips_soak(expected: Expected, data: st.DataObject) -> None:
    _check_round_trip(expected, data)


def test_arguments_are_json_objects_even_for_garbage() -> None:
    text = "<tool_call>typed<arg_key>count</arg_key><arg_value>many</arg_value></tool_call>"
    ((_, _, arguments),) = parse_chunks([text], make_parser(starts_in_reasoning=False)).calls
    assert json.loads(arguments) == {}
