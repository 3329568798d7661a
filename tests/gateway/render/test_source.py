"""Template source resolution: explicit path, model dir, tokenizer_config, bundled."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from gateway.render import RenderSettings, build_renderer, resolve_template
from gateway.render.source import BUNDLED_TEMPLATE, TemplateSourceError

SIMPLE = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ bos_token }}"


def test_bundled_template_by_default(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gateway.render.source"):
        source = resolve_template(RenderSettings())
    text = BUNDLED_TEMPLATE.read_text(encoding="utf-8")
    assert source.text == text
    assert hashlib.sha256(text.encode()).hexdigest() in caplog.text
    assert "bundled" in caplog.text


def test_model_dir_chat_template_wins(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_text(SIMPLE)
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": "ignored", "bos_token": {"content": "<s>"}, "x_token": 1})
    )
    source = resolve_template(RenderSettings(model_dir=tmp_path))
    assert source.text == SIMPLE
    assert source.special_tokens == {"bos_token": "<s>"}
    renderer = build_renderer(RenderSettings(model_dir=tmp_path))
    assert renderer.render([{"role": "user", "content": "hi"}], None, {}) == "[user]hi<s>"


def test_tokenizer_config_chat_template(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": SIMPLE}))
    assert resolve_template(RenderSettings(model_dir=tmp_path)).text == SIMPLE
    named = [{"name": "tool_use", "template": "x"}, {"name": "default", "template": SIMPLE}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}))
    assert resolve_template(RenderSettings(model_dir=tmp_path)).text == SIMPLE


def test_empty_model_dir_falls_back_to_bundled(tmp_path: Path) -> None:
    source = resolve_template(RenderSettings(model_dir=tmp_path))
    assert source.text == BUNDLED_TEMPLATE.read_text(encoding="utf-8")


def test_explicit_template_path(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text(SIMPLE)
    assert resolve_template(RenderSettings(template_path=path, model_dir=tmp_path)).text == SIMPLE
    with pytest.raises(TemplateSourceError):
        resolve_template(RenderSettings(template_path=tmp_path / "missing.jinja"))
