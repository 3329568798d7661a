"""Process helpers for tests; they live in bench.procs so the benchmarks share them."""

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
    "start_gateway",
    "start_process",
    "start_sim",
]
