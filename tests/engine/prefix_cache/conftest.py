"""The pinned sglang-kt wheel, importable for this test package only (CUDA-only parts stubbed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engine.prefix_cache.wheel_import import wheel_on_path
from tests.support.sglang_wheel import sglang_kt_root


@pytest.fixture(scope="package", autouse=True)
def sglang_wheel() -> Iterator[None]:
    with wheel_on_path(sglang_kt_root()):
        yield
