"""The pinned sglang-kt wheel, downloaded and unzipped for the engine's CPU tests.

The wheel needs CUDA torch to install, so it never enters the test virtualenv: tests read
its sources from an unzipped copy under the repository's git-ignored `.cache/` and import
modules from there with the CUDA-only packages stubbed (see the engine test conftests).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.procs import REPO_ROOT

SGLANG_KT_VERSION = "0.7.2"
SGLANG_KT_WHEEL = f"sglang_kt-{SGLANG_KT_VERSION}-py3-none-manylinux_2_35_x86_64.whl"
SGLANG_KT_WHEEL_SHA256 = "f24dfb7c555d3d678e4fa12fc7d03edee332b41141bb42086d0af44412f38f2c"
CACHE_DIR = REPO_ROOT / ".cache"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sglang_kt_root() -> Path:
    """Directory holding the unzipped wheel (its `sglang/` package is inside). Idempotent."""
    target = CACHE_DIR / f"sglang-kt-{SGLANG_KT_VERSION}"
    done = target / ".unzipped"
    if done.exists():
        return target
    wheel_dir = CACHE_DIR / "wheels"
    wheel = wheel_dir / SGLANG_KT_WHEEL
    if not wheel.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "-d",
                str(wheel_dir),
                f"sglang-kt=={SGLANG_KT_VERSION}",
            ],
            check=True,
        )
    actual = _sha256(wheel)
    if actual != SGLANG_KT_WHEEL_SHA256:
        raise RuntimeError(f"{wheel.name}: sha256 {actual}, expected {SGLANG_KT_WHEEL_SHA256}")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    done.touch()
    return target
