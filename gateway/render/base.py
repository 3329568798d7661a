"""The seam between the chat route and chat-template rendering (hop 2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class Renderer(Protocol):
    """Turns an OpenAI conversation into the model's prompt text.

    `messages` and `tools` are the request's JSON as plain dicts (None-valued keys may be
    present; the renderer normalises them the way transformers does). `template_kwargs` holds
    the extra template variables (`reasoning_effort`, everything from `chat_template_kwargs`).
    The returned text ends with the generation prompt. Bad input raises
    `gateway.errors.TemplateInputError` with a message that names what to fix.
    """

    @property
    def name(self) -> str:
        """Short label for logs and metrics, e.g. "jinja2" or "minijinja"."""
        ...

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        template_kwargs: Mapping[str, Any],
    ) -> str: ...
