"""Builds the renderer, the parser factory and the decoding-constraint builder from settings.

The model family is a settings value; only the parser registry knows what it means.
"""

from __future__ import annotations

from typing import Any

from gateway.parsers.base import ParserFactory
from gateway.parsers.constraints import DecodingConstraintBuilder
from gateway.parsers.registry import get_constraint_builder, get_parser_factory
from gateway.render import RenderSettings, build_renderer
from gateway.render.base import Renderer


def load_renderer(render_settings: dict[str, Any]) -> Renderer:
    return build_renderer(RenderSettings.model_validate(render_settings))


def load_constraint_builder(family: str) -> DecodingConstraintBuilder:
    """What makes the engine honour tool_choice "required" / a named function."""
    return get_constraint_builder(family)


def load_parser_factory(family: str) -> ParserFactory:
    return get_parser_factory(family)
