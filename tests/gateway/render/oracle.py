"""The oracle: the model's own template (../shared/reference), rendered by the same engines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gateway.errors import TemplateInputError
from gateway.render.base import Renderer
from gateway.render.renderers import Jinja2Renderer, MiniJinjaRenderer
from gateway.render.source import BUNDLED_TEMPLATE, TemplateSource
from tests.gateway.render.conversations import Case
from tests.support.reference import reference_file

REPO_ROOT = Path(__file__).resolve().parents[3]


def reference_source() -> TemplateSource:
    path = reference_file("glm-5.3-flash", "chat_template.jinja")
    return TemplateSource(path.read_text(encoding="utf-8"), str(path))


def bundled_source() -> TemplateSource:
    return TemplateSource(BUNDLED_TEMPLATE.read_text(encoding="utf-8"), "bundled")


@dataclass(frozen=True)
class Outcome:
    """Rendered text, or the fact that rendering was refused (messages differ by engine)."""

    text: str | None
    error: str | None = None

    def same_as(self, other: Outcome) -> bool:
        return self.text == other.text and (self.error is None) == (other.error is None)


def outcome(renderer: Renderer, case: Case) -> Outcome:
    try:
        return Outcome(renderer.render(case.messages, case.tools, case.kwargs))
    except TemplateInputError as exc:
        return Outcome(None, exc.message)


@dataclass(frozen=True)
class Engines:
    """The reference and the bundled template in both engines, without the Python pre-pass."""

    reference_jinja2: Jinja2Renderer
    reference_minijinja: MiniJinjaRenderer
    template_jinja2: Jinja2Renderer
    template_minijinja: MiniJinjaRenderer


def engines() -> Engines:
    reference, bundled = reference_source(), bundled_source()
    return Engines(
        Jinja2Renderer(reference, prepass=False),
        MiniJinjaRenderer(reference, prepass=False),
        Jinja2Renderer(bundled, prepass=False),
        MiniJinjaRenderer(bundled, prepass=False),
    )
