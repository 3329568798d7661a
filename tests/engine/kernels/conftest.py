"""CPU checks of the fused kernels: Triton's interpreter, and the pinned wheel's own code.

TRITON_INTERPRET decides at decoration time whether a kernel is interpreted, so it is set
here, before the tests import the kernel modules. With the interpreter on (the default)
the GPU-marked tests are skipped; `TRITON_INTERPRET=0 pytest -m gpu tests/engine/kernels`
on a CUDA machine runs only those, compiled for the device.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRETING = os.environ["TRITON_INTERPRET"] == "1"
HERE = Path(__file__).parent

from tests.engine.kernels.wheel import WheelCode  # noqa: E402
from tests.support.sglang_wheel import sglang_kt_root  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    interp = pytest.mark.skip(reason="Triton interpreter on: run with TRITON_INTERPRET=0")
    compiled = pytest.mark.skip(reason="TRITON_INTERPRET=0: CPU checks need the interpreter")
    for item in items:
        if HERE not in Path(str(item.fspath)).parents:
            continue
        on_gpu = item.get_closest_marker("gpu") is not None
        if on_gpu and INTERPRETING:
            item.add_marker(interp)
        elif not on_gpu and not INTERPRETING:
            item.add_marker(compiled)


@pytest.fixture(scope="session")
def wheel() -> WheelCode:
    return WheelCode(sglang_kt_root())


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
