"""The shared simulator process for these tests; modules that need flags start their own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.procs import Proc, start_sim


@pytest.fixture(scope="session")
def sim() -> Iterator[Proc]:
    proc = start_sim(name="shared")
    try:
        yield proc
    finally:
        proc.stop()
