"""The forced-call grammar, checked with llguidance (the pinned engine's default backend).

A byte-level tokenizer with GLM's markup markers as added tokens stands in for GLM's: the
model writes each marker as one token, and llguidance treats every added token as special,
so the grammar must name them as tokens. (A bytes-only tokenizer here once hid that the
grammar spelled them as text: the real engine refused every forced call's first token.)
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.parsers.glm_grammar import GLM45_LAYOUT, GLM47_LAYOUT, GlmConstraintBuilder
from gateway.parsers.glm_markup import (
    CALL_CLOSE,
    CALL_OPEN,
    KEY_CLOSE,
    KEY_OPEN,
    VALUE_CLOSE,
    VALUE_OPEN,
)
from gateway.parsers.tools import ToolChoice, check_tool_calls, declared_functions
from tests.gateway.parsers.strategies import ARGUMENTS
from tests.gateway.parsers.support import TOOLS, canonical, parse, render_call

llguidance = pytest.importorskip("llguidance")
from llguidance import LLMatcher, LLTokenizer, TokenizerWrapper  # noqa: E402

NAMED = {"type": "function", "function": {"name": "get_weather"}}


_MARKERS = (CALL_OPEN, CALL_CLOSE, KEY_OPEN, KEY_CLOSE, VALUE_OPEN, VALUE_CLOSE)
_MARKER_IDS = {m.encode(): 257 + i for i, m in enumerate(_MARKERS)}
_SPLIT = re.compile(b"(" + b"|".join(re.escape(m) for m in _MARKER_IDS) + b")")


class _ByteTokenizer:
    """Bytes, plus each markup marker as one added token, as a Hugging Face tokenizer splits
    added tokens out of any text (values included)."""

    eos_token_id = 256
    bos_token_id = None
    tokens: ClassVar[list[bytes]] = [bytes([i]) for i in range(256)] + [b"<eos>", *_MARKER_IDS]
    special_token_ids: ClassVar[list[int]] = [256, *_MARKER_IDS.values()]

    def __call__(self, text: bytes) -> list[int]:
        ids: list[int] = []
        for piece in _SPLIT.split(text):
            ids.extend([_MARKER_IDS[piece]] if piece in _MARKER_IDS else list(piece))
        return ids


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return LLTokenizer(TokenizerWrapper(_ByteTokenizer()))


def _ebnf(choice: Any, *, newlines: bool = False) -> str:
    builder = GlmConstraintBuilder(GLM45_LAYOUT if newlines else GLM47_LAYOUT)
    constraint = builder(tools=TOOLS, tool_choice=choice, starts_in_reasoning=True)
    assert constraint.request_fields == {"require_reasoning": True}
    grammar = constraint.sampling_params["ebnf"]
    assert isinstance(grammar, str)
    return grammar


def _accepts(tokenizer: Any, grammar: str, text: str) -> bool:
    # sglang-kt's llguidance backend compiles `ebnf` exactly this way.
    matcher = LLMatcher(tokenizer, llguidance.grammar_from("ebnf", grammar), log_level=0)
    ids = _ByteTokenizer()(text.encode())
    return bool(matcher.consume_tokens(ids)) and matcher.is_accepting()


def test_auto_and_none_are_not_constrained() -> None:
    builder = GlmConstraintBuilder(GLM47_LAYOUT)
    for choice in ("auto", "none", None):
        assert builder(tools=TOOLS, tool_choice=choice, starts_in_reasoning=True).is_empty


def test_no_reasoning_no_require_reasoning() -> None:
    builder = GlmConstraintBuilder(GLM47_LAYOUT)
    constraint = builder(tools=TOOLS, tool_choice="required", starts_in_reasoning=False)
    assert constraint.request_fields == {}
    assert "ebnf" in constraint.sampling_params


@pytest.mark.parametrize("newlines", [False, True])
def test_grammars_are_valid_for_llguidance(tokenizer: Any, newlines: bool) -> None:
    for choice in ("required", NAMED):
        compiled = llguidance.grammar_from("ebnf", _ebnf(choice, newlines=newlines))
        is_error, messages = LLMatcher.validate_grammar_with_warnings(compiled, tokenizer)
        assert not is_error, messages


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        (render_call("get_weather", {"city": "a </b> <arg_val", "days": 3}), True),
        # A marker inside a value is the marker token, which ends no value: the parser would
        # read it as markup too.
        (render_call("get_weather", {"city": "a <arg_value> b"}), False),
        (render_call("get_weather", {"city": "Oslo", "unit": "celsius"}), True),
        (render_call("ping", {}) + render_call("free", {"x": "1", "y": "z"}), True),
        (render_call("typed", {"maybe": None, "mode": 3, "config": {"depth": 1}}), True),
        ("Sure! " + render_call("ping", {}), False),  # text instead of a call
        ("", False),  # no call at all
        (render_call("get_weather", {"days": 3}), False),  # required "city" missing
        (render_call("get_weather", {"city": "x", "days": "three"}), False),
        (render_call("get_weather", {"city": "x", "unit": "kelvin"}), False),
        (render_call("nope", {}), False),
    ],
)
def test_required_forces_declared_typed_calls(tokenizer: Any, text: str, accepted: bool) -> None:
    assert _accepts(tokenizer, _ebnf("required"), text) is accepted


def test_named_forces_exactly_that_one_call(tokenizer: Any) -> None:
    grammar = _ebnf(NAMED)
    one = render_call("get_weather", {"city": "Oslo"})
    assert _accepts(tokenizer, grammar, one)
    assert not _accepts(tokenizer, grammar, render_call("ping", {}))
    assert not _accepts(tokenizer, grammar, one + one)


def test_markers_are_tokens_not_their_text(tokenizer: Any) -> None:
    """The model emits `<tool_call>` as one token; its bytes spelled out are other tokens."""
    text = render_call("ping", {})
    spelled = list(text.encode())
    matcher = LLMatcher(tokenizer, llguidance.grammar_from("ebnf", _ebnf("required")), log_level=0)
    assert not (matcher.consume_tokens(spelled) and matcher.is_accepting())
    assert _accepts(tokenizer, _ebnf("required"), text)


def test_newline_layout(tokenizer: Any) -> None:
    text = render_call("get_weather", {"city": "Oslo"}, newlines=True)
    assert _accepts(tokenizer, _ebnf("required", newlines=True), text)
    assert not _accepts(tokenizer, _ebnf("required", newlines=True), text.replace("\n", ""))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_what_the_grammar_accepts_parses_back_and_validates(
    tokenizer: Any, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(["get_weather", "typed", "ping"]))
    arguments = data.draw(ARGUMENTS[name])
    # The grammar takes arguments in the schema's order; the template keeps the caller's.
    parameters = declared_functions(TOOLS)[name]
    properties = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
    arguments = {k: arguments[k] for k in properties if k in arguments}
    text = render_call(name, arguments)
    assert _accepts(tokenizer, _ebnf("required"), text)
    result = parse("r</think>" + text)
    assert [canonical(a) for a in result.arguments()] == [canonical(arguments)]
    assert check_tool_calls(ToolChoice("required"), [n for _, n, _ in result.calls]) is None


def test_unusual_schemas_still_give_a_valid_grammar(tokenizer: Any) -> None:
    odd = [
        {
            "type": "function",
            "function": {
                "name": "odd",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "e": {"enum": []},
                        "r": {"$ref": "#/$defs/x"},
                        "q": {"type": "string", "enum": ['say "hi"\n']},
                        "n": {"type": "number", "minimum": 0, "x-custom": True},
                    },
                    "required": ["q"],
                },
            },
        }
    ]
    builder = GlmConstraintBuilder(GLM47_LAYOUT)
    grammar = builder(tools=odd, tool_choice="required", starts_in_reasoning=False)
    compiled = llguidance.grammar_from("ebnf", grammar.sampling_params["ebnf"])
    is_error, messages = LLMatcher.validate_grammar_with_warnings(compiled, tokenizer)
    assert not is_error, messages
    text = render_call("odd", {"e": [1], "q": 'say "hi"\n', "n": 2.5})
    assert _accepts(tokenizer, grammar.sampling_params["ebnf"], text)
