"""A real redis-server for the shared-state tests (Debian's redis-server: the Makefile's DEBS
installs it; without it the tests skip and say so)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.procs import RedisProc, redis_server_binary, start_redis


@pytest.fixture
def redis_server() -> Iterator[RedisProc]:
    if redis_server_binary() is None:
        pytest.skip("no valkey-server or redis-server on PATH (make debs installs redis-server)")
    proc = start_redis()
    try:
        yield proc
    finally:
        proc.stop()
