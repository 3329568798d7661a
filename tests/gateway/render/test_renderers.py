"""Renderer behaviour: errors are 400s, engines are chosen safely, render is thread-safe."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gateway.errors import TemplateInputError
from gateway.render import RenderSettings, build_renderer
from gateway.render.renderers import (
    AutoRenderer,
    Jinja2Renderer,
    MiniJinjaRenderer,
    template_context,
)
from gateway.render.source import TemplateSource
from tests.gateway.render.conversations import generate
from tests.gateway.render.oracle import bundled_source, reference_source

USER = [{"role": "user", "content": "hi"}]


def test_settings_pick_the_engine() -> None:
    source = bundled_source()
    assert build_renderer(RenderSettings(renderer="jinja2"), source).name == "jinja2"
    assert build_renderer(RenderSettings(renderer="minijinja"), source).name == "minijinja"
    assert build_renderer(RenderSettings(), source).name == "auto"


def test_generation_prompt_and_kwargs_reach_the_template() -> None:
    renderer = build_renderer(RenderSettings(), bundled_source())
    text = renderer.render(USER, None, {"reasoning_effort": "low"})
    assert text == "[gMASK]<sop><|system|>Reasoning Effort: Low<|user|>hi<|assistant|><think>"
    assert "Effort: High" in renderer.render(USER, None, {"reasoning_effort": "high"})
    assert "Effort: Max" in renderer.render(USER, None, {"reasoning_effort": "medium"})


@pytest.mark.parametrize("engine", ["jinja2", "minijinja", "auto"])
@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ raise_exception('no system role here') }}", "no system role here"),
        ("{{ messages[0].content.missing.deeper }}", "missing"),
        ("{{ messages[0].content + 1 }}", ""),
    ],
)
def test_template_errors_are_client_errors(engine: str, template: str, message: str) -> None:
    renderer = build_renderer(RenderSettings(renderer=engine), TemplateSource(template, "t"))
    if engine == "minijinja" and "missing" in template:
        # chainable undefined: MiniJinja renders a missing attribute chain as empty text
        assert renderer.render(USER, None, {}) == ""
        return
    with pytest.raises(TemplateInputError) as raised:
        renderer.render(USER, None, {})
    assert raised.value.status_code == 400
    assert message in raised.value.message


def test_reference_refusal_is_a_client_error() -> None:
    renderer = build_renderer(RenderSettings(renderer="jinja2"), reference_source())
    messages = [{"role": "tool", "content": [{"type": "tool_reference", "name": "f"}]}]
    with pytest.raises(TemplateInputError, match="tool_references_to_response"):
        renderer.render(messages, None, {})


@pytest.mark.parametrize("key", ["messages", "tools", "add_generation_prompt", "documents"])
def test_reserved_kwargs_are_rejected(key: str) -> None:
    renderer = build_renderer(RenderSettings(), bundled_source())
    with pytest.raises(TemplateInputError, match=key):
        renderer.render(USER, None, {key: 1})


def test_client_cannot_inject_the_precomputed_order() -> None:
    renderer = build_renderer(RenderSettings(), bundled_source())
    messages: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {}}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": "r"},
    ]
    expected = renderer.render(messages, None, {})
    assert renderer.render(messages, None, {"flashbox_tool_order": [None, [[0, -1]]]}) == expected


def test_auto_uses_minijinja_only_for_plain_input() -> None:
    renderer = build_renderer(RenderSettings(), bundled_source())
    assert isinstance(renderer, AutoRenderer)
    source = bundled_source()
    plain = template_context(source, USER, None, {}, prepass=True)
    assert isinstance(renderer.engine_for(plain), MiniJinjaRenderer)
    floats = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x": 1.0}'}}],
        }
    ]
    context = template_context(source, floats, None, {}, prepass=True)
    assert isinstance(renderer.engine_for(context), Jinja2Renderer)
    assert "<arg_value>1.0</arg_value>" in renderer.render(floats, None, {})


def test_auto_with_a_foreign_template_never_uses_minijinja(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0].content }}")
    renderer = build_renderer(RenderSettings(model_dir=tmp_path))
    assert isinstance(renderer, AutoRenderer)
    context = template_context(TemplateSource("x", "t"), USER, None, {}, prepass=True)
    assert isinstance(renderer.engine_for(context), Jinja2Renderer)


@pytest.mark.parametrize("engine", ["jinja2", "minijinja", "auto"])
def test_render_is_thread_safe(engine: str) -> None:
    renderer = build_renderer(RenderSettings(renderer=engine), bundled_source())
    cases = [generate(seed) for seed in range(40)] * 3

    def one(index: int) -> str | None:
        case = cases[index]
        try:
            return renderer.render(case.messages, case.tools, case.kwargs)
        except TemplateInputError as exc:
            return "error: " + exc.message

    serial = [one(i) for i in range(len(cases))]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(one, range(len(cases))))
    assert parallel == serial


def test_transformers_environment_extras() -> None:
    template = (
        "{% generation %}{{ messages[0].content | tojson }}{% endgeneration %}"
        "{% for m in messages %}{% break %}{% endfor %}{{ strftime_now('%Y') | length }}"
    )
    renderer = build_renderer(RenderSettings(renderer="jinja2"), TemplateSource(template, "t"))
    messages = [{"role": "user", "content": "<é>"}]
    assert renderer.render(messages, None, {}) == '"<é>"4'
