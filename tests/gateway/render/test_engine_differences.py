"""Where MiniJinja and transformers' Jinja2 differ on the model's own template.

These are why the default renderer uses MiniJinja only for "plain" input (gateway/render/plain.py)
and why templates/README.md lists them; each case is excluded from "plain".
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.render.plain import is_plain
from gateway.render.renderers import template_context
from tests.gateway.render.conversations import Case
from tests.gateway.render.oracle import bundled_source, engines, outcome


def _call(arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": arguments}}],
        }
    ]


@pytest.mark.parametrize(
    ("messages", "jinja2_has", "minijinja_has"),
    [
        (_call({"x": 1.0}), "<arg_value>1.0</arg_value>", "<arg_value>1</arg_value>"),
        (_call({"x": -0.0}), "<arg_value>-0.0</arg_value>", "<arg_value>0</arg_value>"),
        ([{"role": "user", "content": 1e20}], "<|user|>1e+20", "<|user|>100000000000000000000.0"),
        (
            [{"role": "assistant", "content": "\x1chi\x1f"}],
            "<think></think>hi<|assistant|>",
            "<think></think>\x1chi\x1f<|assistant|>",
        ),
        (
            [{"role": "tool", "content": {"k": "v"}}],
            None,
            "<tool_response>{'k': 'v'}</tool_response>",
        ),
    ],
)
def test_engines_differ_on_the_reference(
    messages: list[dict[str, Any]], jinja2_has: str | None, minijinja_has: str
) -> None:
    oracle = engines()
    case = Case(0, messages, None, {})
    jinja2_out = outcome(oracle.reference_jinja2, case)
    minijinja_out = outcome(oracle.reference_minijinja, case)
    if jinja2_has is None:
        assert jinja2_out.error is not None  # Jinja2 refuses; chainable undefined lets it through
    else:
        assert jinja2_out.text is not None
        assert jinja2_has in jinja2_out.text
    assert minijinja_out.text is not None
    assert minijinja_has in minijinja_out.text
    # The bundled template reproduces each engine's own behaviour ...
    assert outcome(oracle.template_jinja2, case).same_as(jinja2_out)
    assert outcome(oracle.template_minijinja, case).same_as(minijinja_out)
    # ... and the production default never sends such input to MiniJinja.
    context = template_context(bundled_source(), messages, None, {}, prepass=True)
    assert not is_plain(context)
