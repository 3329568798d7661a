"""Finds the renderer and the parser factory for the configured model family.

gateway.render and gateway.parsers.registry are built separately; until they provide their
entry points, the gateway runs with a minimal renderer and a passthrough parser, so the
application around them can be built and tested on its own.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any, cast

from gateway.parsers.base import ParserFactory
from gateway.parsers.constraints import DecodingConstraintBuilder
from gateway.render.base import Renderer
from gateway.render_fallback import FallbackRenderer
from gateway.stream.passthrough import passthrough_factory

log = logging.getLogger("gateway.components")


def _optional_module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None


def load_renderer(render_settings: dict[str, Any]) -> Renderer:
    package = _optional_module("gateway.render")
    build = getattr(package, "build_renderer", None)
    settings_module = _optional_module("gateway.render.settings")
    if build is None or settings_module is None:
        log.warning("gateway.render.build_renderer not found: using the fallback renderer")
        return FallbackRenderer()
    settings = settings_module.RenderSettings.model_validate(render_settings)
    return cast(Renderer, build(settings))


def load_constraint_builder(family: str) -> DecodingConstraintBuilder | None:
    """What makes the engine honour tool_choice "required" / a named function, if known."""
    registry = _optional_module("gateway.parsers.registry")
    get = getattr(registry, "get_constraint_builder", None)
    return None if get is None else cast(DecodingConstraintBuilder, get(family))


def load_parser_factory(family: str) -> ParserFactory:
    registry = _optional_module("gateway.parsers.registry")
    if registry is None:
        log.warning("gateway.parsers.registry not found: generated text passes through as content")
        return passthrough_factory
    return cast(ParserFactory, registry.get_parser_factory(family))
