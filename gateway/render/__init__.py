"""Hop 2: chat-template rendering. `build_renderer(settings)` once at startup, then
`renderer.render(messages, tools, template_kwargs)` per request (thread-safe)."""

from __future__ import annotations

import logging
from typing import Any

from gateway.render.base import Renderer
from gateway.render.plain import is_plain
from gateway.render.renderers import AutoRenderer, Jinja2Renderer, MiniJinjaRenderer
from gateway.render.settings import RenderSettings
from gateway.render.source import BUNDLED_TEMPLATE, TemplateSource, resolve_template

__all__ = [
    "RenderSettings",
    "Renderer",
    "TemplateSource",
    "build_renderer",
    "resolve_template",
]

log = logging.getLogger(__name__)


def _is_bundled(source: TemplateSource) -> bool:
    try:
        bundled = TemplateSource(BUNDLED_TEMPLATE.read_text(encoding="utf-8"), "bundled")
    except OSError:
        return False
    return source.sha256 == bundled.sha256


def _never(context: dict[str, Any]) -> bool:
    return False


def build_renderer(settings: RenderSettings, source: TemplateSource | None = None) -> Renderer:
    """The renderer the settings ask for; `source` overrides template resolution (tests)."""
    source = source if source is not None else resolve_template(settings)
    renderer: Renderer
    if settings.renderer == "jinja2":
        renderer = Jinja2Renderer(source, settings.prepass)
    elif settings.renderer == "minijinja":
        renderer = MiniJinjaRenderer(source, settings.prepass)
    else:
        # MiniJinja's equivalence is proven for the bundled template only; any other template
        # renders with Jinja2, the engine the model was trained with.
        renderer = AutoRenderer(
            source, is_plain if _is_bundled(source) else _never, settings.prepass
        )
    log.info("chat template renderer: %s (prepass=%s)", renderer.name, settings.prepass)
    return renderer
