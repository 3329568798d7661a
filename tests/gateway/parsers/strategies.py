"""Hypothesis strategies: GLM outputs, well-formed (with the expected parse) and noisy."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.gateway.parsers.support import render_call

# Text that likes to look like markup: tag pieces, partial tags, quotes, escapes, newlines.
_ALPHABET = st.sampled_from([*list('ab <>/_\n\t"\\{}:,é😀'), "<t", "</", "_call", "arg"])
TEXT = st.lists(_ALPHABET, max_size=12).map("".join)

MARKUP = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<tool_ca",
    "</arg_val",
    "get_weather",
    "typed",
    "ping",
    "free",
    "nope",
    "city",
    "count",
    "config",
    "123",
    '{"a": [1, 2]}',
    "true",
    "\n",
    " ",
    "<tool_call>get_weather",
    "<tool_call>typed",
    "<tool_call>ping",
    "<tool_call>free\n",
    "<arg_key>city</arg_key>",
    "<arg_key>count</arg_key>",
    "<arg_key>label</arg_key>",
    "<arg_key>mode</arg_key>",
    "<arg_key>a</arg_key>",
]
TOKEN_SOUP = st.lists(st.one_of(st.sampled_from(MARKUP), TEXT), max_size=40).map("".join)


def _free_string(*, allow_json: bool) -> st.SearchStrategy[str]:
    """Strings a value may hold; without `allow_json`, none that also reads as JSON."""
    base = TEXT.filter(lambda s: "</arg_value>" not in s)
    if allow_json:
        return base

    def not_json(s: str) -> bool:
        try:
            json.loads(s)
        except ValueError:
            return True
        return False

    return base.filter(not_json)


_FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64)
_JSON_LEAF = st.none() | st.booleans() | st.integers(-(10**12), 10**12) | _FLOATS | TEXT
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)

# Per tool in support.TOOLS: a strategy for arguments that conform to its schema.
ARGUMENTS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "get_weather": st.fixed_dictionaries(
        {"city": _free_string(allow_json=True)},
        optional={
            "days": st.integers(-5, 10**6),
            "unit": st.sampled_from(["celsius", "fahrenheit"]),
        },
    ),
    "typed": st.fixed_dictionaries(
        {},
        optional={
            "text": _free_string(allow_json=True),
            "count": st.integers(),
            "ratio": _FLOATS | st.integers(),
            "flag": st.booleans(),
            "maybe": st.none() | st.integers(),
            "label": st.none() | _free_string(allow_json=False),
            "either": st.integers() | st.booleans(),
            "one": st.none() | st.lists(st.integers(), max_size=4),
            "mode": st.sampled_from(["fast", "slow", 3]),
            "config": st.fixed_dictionaries({"depth": st.integers()}),
            "tags": st.lists(TEXT, max_size=3),
        },
    ),
    "ping": st.just({}),
    "free": st.dictionaries(
        st.sampled_from(["a", "b", "c"]),
        # A top-level string is written raw, so only non-string JSON goes through as JSON.
        _free_string(allow_json=False) | _JSON.filter(lambda v: not isinstance(v, str)),
        max_size=3,
    ),
}


@dataclass
class Expected:
    text: str
    reasoning: str
    content: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def _outside_markup(text: str, *, tags: tuple[str, ...]) -> bool:
    return not any(tag in text for tag in tags)


REASONING = TEXT.filter(
    lambda s: _outside_markup(s, tags=("</think>", "<tool_call>")) and not s.startswith("<think")
)
CONTENT = TEXT.filter(lambda s: _outside_markup(s, tags=("</think>", "<tool_call>")))


@st.composite
def well_formed_output(draw: st.DrawFn) -> Expected:
    """Reasoning, `</think>`, then content pieces and calls in any order."""
    reasoning = draw(REASONING)
    newlines = draw(st.booleans())
    text = reasoning + "</think>"
    segments: list[str] = []
    calls: list[tuple[str, dict[str, Any]]] = []
    previous_was_content = False
    for _ in range(draw(st.integers(0, 4))):
        # Two pieces of content in a row could join into a tag; one piece covers that text.
        previous_was_content = not previous_was_content and draw(st.booleans())
        if previous_was_content:
            segment = draw(CONTENT)
            segments.append(segment)
            text += segment
        else:
            name = draw(st.sampled_from(sorted(ARGUMENTS)))
            arguments = draw(ARGUMENTS[name])
            calls.append((name, arguments))
            text += render_call(name, arguments, newlines=newlines)
    return Expected(text, reasoning, "".join(segments).strip(), calls)


@st.composite
def mutated_output(draw: st.DrawFn) -> str:
    """A well-formed output with a few spans cut out or replaced: broken markup."""
    text = draw(well_formed_output()).text
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 12)))
        text = text[:start] + draw(st.sampled_from(["", *MARKUP[:8]])) + text[end:]
    return text


NOISY_OUTPUT = st.one_of(TOKEN_SOUP, mutated_output())
