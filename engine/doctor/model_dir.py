"""What a model directory holds: its config, chat template and weight files (stat only)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors",)


@dataclass(frozen=True)
class ModelDir:
    path: Path
    config_error: str | None
    architectures: tuple[str, ...]
    quant_method: str | None
    chat_template: str | None
    weight_files: int
    weight_bytes: int

    @property
    def weights_gb(self) -> float:
        return self.weight_bytes / 1e9


def _chat_template(path: Path) -> str | None:
    """Where the chat template lives, if anywhere."""
    if (path / "chat_template.jinja").is_file():
        return "chat_template.jinja"
    try:
        tokenizer_config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(tokenizer_config, dict) and tokenizer_config.get("chat_template"):
        return "tokenizer_config.json"
    return None


def inspect_model_dir(path: Path) -> ModelDir:
    config_error: str | None = None
    architectures: tuple[str, ...] = ()
    quant_method: str | None = None
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        config_error = "no config.json"
        config = {}
    except (OSError, ValueError) as exc:
        config_error = f"config.json unreadable ({exc})"
        config = {}
    if isinstance(config, dict):
        raw = config.get("architectures") or ()
        architectures = tuple(str(a) for a in raw) if isinstance(raw, list) else ()
        quant = config.get("quantization_config")
        if isinstance(quant, dict) and quant.get("quant_method") is not None:
            quant_method = str(quant["quant_method"])
    files = 0
    size = 0
    try:
        for entry in path.iterdir():
            if entry.suffix in WEIGHT_SUFFIXES and entry.is_file():
                files += 1
                size += entry.stat().st_size
    except OSError:
        pass
    return ModelDir(
        path=path,
        config_error=config_error,
        architectures=architectures,
        quant_method=quant_method,
        chat_template=_chat_template(path),
        weight_files=files,
        weight_bytes=size,
    )
