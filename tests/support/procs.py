"""Process helpers for tests; they live in bench.procs so the benchmarks share them."""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from bench.procs import (
    REPO_ROOT,
    Proc,
    free_port,
    running,
    start_gateway,
    start_process,
    start_sim,
)

__all__ = [
    "REPO_ROOT",
    "Proc",
    "free_port",
    "running",
    "sims_behind_gateway",
    "start_gateway",
    "start_process",
    "start_sim",
]


@contextmanager
def sims_behind_gateway(
    name: str, env: Mapping[str, str], replicas: int = 3
) -> Iterator[tuple[list[Proc], Proc]]:
    """`replicas` simulators and one gateway in front of them, stopped on exit."""
    sims = [start_sim(name=f"{name}-{i}") for i in range(replicas)]
    try:
        gateway = start_gateway([s.url for s in sims], env=dict(env))
        try:
            yield sims, gateway
        finally:
            gateway.stop()
    finally:
        for sim in sims:
            sim.stop()
