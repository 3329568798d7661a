"""What every engine patch checks before it touches sglang-kt.

A patch is written against exact upstream source files. If the installed files are not the
ones it was written against, it must refuse to act and say why, rather than patch code it
has never seen. Each patch is also switched by its own environment variable.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("flashbox.engine.patches")

_TRUE = {"1", "true", "yes", "on"}


def switch_on(env_var: str, *, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Read a patch's on/off switch; anything but a clear yes/no falls back to the default."""
    value = (environ if environ is not None else os.environ).get(env_var)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() in _TRUE


def module_source(module: str) -> Path | None:
    """Path of an importable module's source file, without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin)


def sources_match(expected: Mapping[str, str], *, patch: str) -> bool:
    """True when every module's source has the sha256 the patch was written against.

    `expected` maps module names (e.g. "sglang.srt.server_args") to sha256 hex digests.
    Logs, for the operator, which file differs and why the patch stays off.
    """
    for module, want in expected.items():
        path = module_source(module)
        if path is None:
            log.warning("%s: not applied: %s is not installed", patch, module)
            return False
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        if got != want:
            log.warning(
                "%s: not applied: %s has sha256 %s, this patch was written for %s",
                patch,
                module,
                got,
                want,
            )
            return False
    return True
