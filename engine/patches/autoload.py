"""Loaded in every engine process (a `.pth` line in the engine image): installs each patch.

Each patch package exposes `install()`, which reads its own switch and checks the sglang-kt
sources it was written for. A patch that fails to install is logged and skipped: this module
runs at interpreter start-up, where an exception would break every Python process.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence

log = logging.getLogger("flashbox.engine.patches")

# One line per patch package.
PATCH_MODULES: tuple[str, ...] = ("engine.patches.prefix_cache", "engine.patches.kernels")


def install_all(modules: Sequence[str] = PATCH_MODULES) -> dict[str, object]:
    """Install every patch; returns what each `install()` returned (None when it failed)."""
    results: dict[str, object] = {}
    for name in modules:
        try:
            results[name] = importlib.import_module(name).install()
        except Exception:
            log.exception("%s: not installed", name)
            results[name] = None
    return results


install_all()
