"""Model families -> their output parser and tool_choice constraints (the one place names live).

The chat route asks for the family named in configuration and never branches on it:
`get_parser_factory(family)(tools=..., tool_choice=..., starts_in_reasoning=...)` gives the
per-choice parser; `get_constraint_builder(family)(...)` gives what to add to the engine
request so tool_choice "required"/named is enforced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.parsers.base import ParserFactory
from gateway.parsers.constraints import DecodingConstraintBuilder
from gateway.parsers.glm import GlmParserFactory
from gateway.parsers.glm_grammar import GLM45_LAYOUT, GLM47_LAYOUT, GlmConstraintBuilder
from gateway.parsers.stream_core import ParserLimits


@dataclass(frozen=True, slots=True)
class ParserFamily:
    make_parser_factory: Callable[[ParserLimits], ParserFactory]
    constraint_builder: DecodingConstraintBuilder


def _glm_parsers(limits: ParserLimits) -> ParserFactory:
    return GlmParserFactory(limits=limits)


# GLM-4.7/5.x (GLM-5.3-Flash) and GLM-4.5/4.6 share one parser (it reads both layouts);
# they differ in the layout their forced-call grammar writes. Names follow SGLang's
# --tool-call-parser values.
_FAMILIES: dict[str, ParserFamily] = {
    "glm47": ParserFamily(_glm_parsers, GlmConstraintBuilder(GLM47_LAYOUT)),
    "glm45": ParserFamily(_glm_parsers, GlmConstraintBuilder(GLM45_LAYOUT)),
}


def family_names() -> list[str]:
    return sorted(_FAMILIES)


def _family(family: str) -> ParserFamily:
    try:
        return _FAMILIES[family]
    except KeyError:
        known = ", ".join(family_names())
        raise ValueError(f"unknown parser family {family!r}; known: {known}") from None


def get_parser_factory(family: str, limits: ParserLimits | None = None) -> ParserFactory:
    """The parser factory for `family`; raises ValueError (naming the known ones) if unknown."""
    return _family(family).make_parser_factory(limits or ParserLimits())


def get_constraint_builder(family: str) -> DecodingConstraintBuilder:
    """What enforces tool_choice "required"/named for `family` on the engine."""
    return _family(family).constraint_builder
