"""The KDA snapshot device check on a CUDA host that has no sglang-kt installed.

`engine.patches.prefix_cache.device_check` expects the engine image (sglang-kt 0.7.2 and its
CUDA packages installed). A plain CUDA machine with torch and Triton can run the same check
against the unzipped pinned wheel: the KDA backend's kernels are Triton, so only the
serving-only imports need stand-ins, which `wheel_on_path(on_device=True)` provides.

    python -m tests.engine.prefix_cache.device_run [device_check flags]

Exit status as device_check's: 0 when every check passes, 2 without CUDA.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch

from tests.engine.prefix_cache.wheel_import import wheel_on_path
from tests.support.sglang_wheel import sglang_kt_root


def main(argv: Sequence[str] | None = None) -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing checked")
        return 2
    with wheel_on_path(sglang_kt_root(), on_device=True):
        # Imported inside: the check's modules import sglang at their top.
        from engine.patches.prefix_cache import device_check

        return device_check.main(argv)


if __name__ == "__main__":
    sys.exit(main())
