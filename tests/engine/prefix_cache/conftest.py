"""The pinned sglang-kt wheel, importable for this test package only (CUDA-only parts stubbed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.engine.prefix_cache.wheel_import import wheel_on_path
from tests.support.sglang_wheel import sglang_kt_root


@pytest.fixture(scope="package", autouse=True)
def sglang_wheel() -> Iterator[None]:
    with wheel_on_path(sglang_kt_root()):
        yield


@pytest.fixture
def glm_args() -> Iterator[Any]:
    """GLM-5-Next server args that passed the opted-in validator, installed as the globals."""
    # Imported here: the wheel is on sys.path only once the package fixture above has run.
    from tests.engine.prefix_cache.builders import global_server_args, prefix_cache_on, server_args

    with prefix_cache_on():
        args = server_args()
        args._validate_glm5_next_session_ab_boundary()
        with global_server_args(args):
            yield args
