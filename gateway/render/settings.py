"""Settings of the rendering hop: which engine, which template, when to leave the event loop."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict


class RenderSettings(BaseModel):
    """How the gateway turns a conversation into prompt text.

    `renderer`: "auto" renders with MiniJinja when the input is of a kind shown to render
    identically to transformers' Jinja2 output (see templates/README.md) and with Jinja2
    otherwise; "jinja2" and "minijinja" force one engine.
    Template source, first that exists: `template_path`; `model_dir`/chat_template.jinja;
    `model_dir`/tokenizer_config.json's "chat_template"; the project's bundled template.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    renderer: Literal["auto", "jinja2", "minijinja"] = "auto"
    template_path: Path | None = None
    model_dir: Path | None = None
    # Validate and order tool results once in Python when the template declares it accepts
    # that (the bundled template does); output is identical either way, only faster.
    prepass: bool = True
