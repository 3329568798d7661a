"""A real redis-server for the shared-state tests (Debian's redis-server: the Makefile's DEBS
installs it; without it the tests skip and say so)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from bench.procs import Proc, RedisProc, redis_server_binary, start_gateway, start_redis, start_sim


@pytest.fixture
def redis_server() -> Iterator[RedisProc]:
    if redis_server_binary() is None:
        pytest.skip("no valkey-server or redis-server on PATH (make debs installs redis-server)")
    proc = start_redis()
    try:
        yield proc
    finally:
        proc.stop()


@dataclass
class GatewayFleet:
    store: RedisProc
    sim: Proc
    gateways: list[Proc]


@contextmanager
def gateway_fleet(
    env: Mapping[str, str], *sim_args: str, time_scale: float = 0.001, count: int = 2
) -> Iterator[GatewayFleet]:
    """A redis-server, one simulator (`sim_args`) and `count` gateway processes in front of it
    sharing the store, all stopped on the way out; the test skips without redis-server. `env`
    gets the store's URL and a generous round-trip bound (this box is shared and loaded)."""
    if redis_server_binary() is None:
        pytest.skip("no valkey-server or redis-server on PATH (make debs installs redis-server)")
    store = start_redis()
    procs: list[Proc] = []
    env = {"FLASHBOX_STATE__TIMEOUT_S": "0.5", **env, "FLASHBOX_STATE_URL": store.url}
    try:
        sim = start_sim(*sim_args, time_scale=time_scale)
        procs.append(sim)
        gateways = [start_gateway([sim.url], env=env) for _ in range(count)]
        procs.extend(gateways)
        yield GatewayFleet(store, sim, gateways)
    finally:
        for proc in reversed(procs):
            proc.stop()
        store.stop()
