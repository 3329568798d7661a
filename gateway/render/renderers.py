"""The renderers: Jinja2 as transformers runs it, MiniJinja configured to match, and "auto".

Each compiles its template once at construction and only reads shared state when rendering,
so `render` is safe to call from several threads at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jinja2
import minijinja

from gateway.errors import TemplateInputError
from gateway.render.environments import jinja2_template, minijinja_environment
from gateway.render.normalize import normalise_messages, normalise_tools
from gateway.render.prepass import ORDER_VARIABLE, tool_order
from gateway.render.source import TemplateSource

# Variables transformers sets itself; a chat_template_kwargs key of the same name would be a
# duplicate keyword argument there, so it is a client error here too.
RESERVED_KWARGS = ("messages", "tools", "documents", "add_generation_prompt")

# What a template failure can raise while rendering: all of it is about the input.
_JINJA2_ERRORS = (
    jinja2.TemplateError,
    TypeError,
    ValueError,
    AttributeError,
    KeyError,
    IndexError,
    OverflowError,
    RecursionError,
    ZeroDivisionError,
)
_MINIJINJA_ERRORS = (minijinja.TemplateError, TypeError, ValueError, OverflowError, RecursionError)


def template_context(
    source: TemplateSource,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    template_kwargs: Mapping[str, Any],
    prepass: bool,
) -> dict[str, Any]:
    """The variables a render sees: special tokens, the client's kwargs, then ours."""
    for key in RESERVED_KWARGS:
        if key in template_kwargs:
            raise TemplateInputError(
                f"chat_template_kwargs may not set {key!r}; it is set from the request",
                param="chat_template_kwargs",
            )
    context: dict[str, Any] = dict(source.special_tokens)
    context.update((k, v) for k, v in template_kwargs.items() if k != ORDER_VARIABLE)
    normalised = normalise_messages(messages)
    context["messages"] = normalised
    context["tools"] = normalise_tools(tools)
    context["documents"] = None
    context["add_generation_prompt"] = True
    if prepass:
        order = tool_order(normalised)
        if order is not None:
            context[ORDER_VARIABLE] = order
    return context


def _template_error(exc: BaseException) -> TemplateInputError:
    message = str(exc) or type(exc).__name__
    return TemplateInputError(f"the chat template rejected the conversation: {message}")


def _uses_prepass(source: TemplateSource, enabled: bool) -> bool:
    """Only a template that reads the precomputed order benefits from (and trusts) it."""
    return enabled and ORDER_VARIABLE in source.text


class _TemplateRenderer:
    """Shared by the engines: build the template context, then render it."""

    _source: TemplateSource
    _prepass: bool

    def render_context(self, context: dict[str, Any]) -> str:
        raise NotImplementedError

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        template_kwargs: Mapping[str, Any],
    ) -> str:
        context = template_context(self._source, messages, tools, template_kwargs, self._prepass)
        return self.render_context(context)


class Jinja2Renderer(_TemplateRenderer):
    """transformers' `apply_chat_template(..., tokenize=False, add_generation_prompt=True)`."""

    def __init__(self, source: TemplateSource, prepass: bool = True) -> None:
        self._source = source
        self._prepass = _uses_prepass(source, prepass)
        self._template = jinja2_template(source.text)

    @property
    def name(self) -> str:
        return "jinja2"

    def render_context(self, context: dict[str, Any]) -> str:
        try:
            return self._template.render(context)
        except _JINJA2_ERRORS as exc:
            raise _template_error(exc) from exc


class MiniJinjaRenderer(_TemplateRenderer):
    """The same template in MiniJinja (Rust): faster, but not identical on every input."""

    _NAME = "chat_template"

    def __init__(self, source: TemplateSource, prepass: bool = True) -> None:
        self._source = source
        self._prepass = _uses_prepass(source, prepass)
        self._env = minijinja_environment(source.text, self._NAME)

    @property
    def name(self) -> str:
        return "minijinja"

    def render_context(self, context: dict[str, Any]) -> str:
        try:
            text: str = self._env.render_template(self._NAME, **context)
        except _MINIJINJA_ERRORS as exc:
            raise _template_error(exc) from exc
        return text


class AutoRenderer(_TemplateRenderer):
    """MiniJinja for inputs of the kind proven to render identically, Jinja2 for the rest."""

    def __init__(
        self,
        source: TemplateSource,
        is_safe: Callable[[dict[str, Any]], bool],
        prepass: bool = True,
    ) -> None:
        self._source = source
        self._prepass = _uses_prepass(source, prepass)
        self._jinja2 = Jinja2Renderer(source, prepass)
        self._minijinja = MiniJinjaRenderer(source, prepass)
        self._is_safe = is_safe

    @property
    def name(self) -> str:
        return "auto"

    def engine_for(self, context: dict[str, Any]) -> Jinja2Renderer | MiniJinjaRenderer:
        return self._minijinja if self._is_safe(context) else self._jinja2

    def render_context(self, context: dict[str, Any]) -> str:
        engine = self.engine_for(context)
        if engine is self._jinja2:
            return engine.render_context(context)
        try:
            return engine.render_context(context)
        except TemplateInputError:
            # Jinja2's verdict (and message) is the reference one, should the two ever differ.
            return self._jinja2.render_context(context)
