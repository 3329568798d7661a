"""Where the chat template comes from, and the tokenizer's special tokens that go with it."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.render.settings import RenderSettings

log = logging.getLogger(__name__)

# The project's own template, shipped in the repository (and the image) next to the package.
BUNDLED_TEMPLATE = Path(__file__).resolve().parents[2] / "templates" / "glm-5.3-flash.jinja"


class TemplateSourceError(RuntimeError):
    """The configured template cannot be loaded: a startup error, not a request error."""


@dataclass(frozen=True)
class TemplateSource:
    text: str
    origin: str
    special_tokens: dict[str, str] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def _special_tokens(config: dict[str, Any]) -> dict[str, str]:
    """transformers hands `bos_token`, `eos_token`, ... to every template render."""
    tokens: dict[str, str] = {}
    for key, value in config.items():
        if not key.endswith("_token"):
            continue
        if isinstance(value, str):
            tokens[key] = value
        elif isinstance(value, dict) and isinstance(value.get("content"), str):
            tokens[key] = value["content"]
    return tokens


def _tokenizer_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise TemplateSourceError(f"{path} is not valid JSON: {exc}") from exc
    return loaded if isinstance(loaded, dict) else {}


def _config_template(config: dict[str, Any]) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, str):
        return template
    if isinstance(template, list):  # named templates: transformers uses "default"
        for item in template:
            if isinstance(item, dict) and item.get("name") == "default":
                text = item.get("template")
                return text if isinstance(text, str) else None
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateSourceError(f"cannot read chat template {path}: {exc}") from exc


def resolve_template(settings: RenderSettings) -> TemplateSource:
    """First that exists: template_path, model_dir's chat_template.jinja, tokenizer_config's
    chat_template, the bundled template. Logs which one and its sha256."""
    config = _tokenizer_config(settings.model_dir) if settings.model_dir else {}
    tokens = _special_tokens(config)
    if settings.template_path is not None:
        source = TemplateSource(_read(settings.template_path), str(settings.template_path), tokens)
    elif settings.model_dir is not None and (settings.model_dir / "chat_template.jinja").is_file():
        path = settings.model_dir / "chat_template.jinja"
        source = TemplateSource(_read(path), str(path), tokens)
    elif (text := _config_template(config)) is not None:
        origin = f"{settings.model_dir}/tokenizer_config.json#chat_template"
        source = TemplateSource(text, origin, tokens)
    else:
        source = TemplateSource(_read(BUNDLED_TEMPLATE), f"bundled {BUNDLED_TEMPLATE.name}", tokens)
    log.info("chat template: %s sha256=%s", source.origin, source.sha256)
    return source
