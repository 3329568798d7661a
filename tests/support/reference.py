"""Shared reference data (../shared/reference beside the checkout; CI sets FLASHBOX_REFERENCE_DIR).

A newcomer's fresh clone has no ../shared: tests that need a reference file skip, saying which
file and how to provide it, instead of failing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def reference_dir() -> Path:
    configured = os.environ.get("FLASHBOX_REFERENCE_DIR")
    return Path(configured) if configured else REPO_ROOT.parent / "shared" / "reference"


def reference_file(*parts: str) -> Path:
    """The reference file at `parts`, or a pytest skip naming it when it is absent."""
    path = reference_dir().joinpath(*parts)
    if not path.is_file():
        pytest.skip(
            f"reference data not found at {path}: set FLASHBOX_REFERENCE_DIR to the shared "
            "reference folder (CI does)"
        )
    return path
