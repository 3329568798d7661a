"""Probe a host through injectable readers, so tests can feed recorded outputs."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.launch.cpu import CpuFacts, cpu_facts, parse_cpuinfo, parse_cpulist
from engine.launch.gpu import (
    NVIDIA_SMI_BANNER,
    NVIDIA_SMI_QUERY,
    Gpu,
    parse_cuda_version,
    parse_gpu_query,
)

CommandRunner = Callable[[Sequence[str]], str | None]
AffinityReader = Callable[[], frozenset[int] | None]

COMMAND_TIMEOUT_S = 20.0


def run_command(argv: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S) -> str | None:
    """stdout of a command, or None when it is missing, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def process_affinity() -> frozenset[int] | None:
    """CPUs this process may run on (a container's --cpuset-cpus shows up here)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


@dataclass(frozen=True)
class HostSources:
    """Where host facts come from. `root` stands for "/" (proc/, sys/ below it)."""

    root: Path = Path("/")
    run: CommandRunner = run_command
    affinity: AffinityReader = process_affinity

    def read(self, relative: str) -> str | None:
        try:
            return (self.root / relative).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: frozenset[int]


@dataclass(frozen=True)
class Memory:
    total_kib: int
    available_kib: int | None

    @property
    def total_gib(self) -> float:
        return self.total_kib / 2**20

    @property
    def total_gb(self) -> float:
        return self.total_kib * 1024 / 1e9


@dataclass(frozen=True)
class HostFacts:
    gpus: tuple[Gpu, ...] = ()
    cuda_version: tuple[int, int] | None = None
    cpu: CpuFacts | None = None
    numa: tuple[NumaNode, ...] | None = None
    memory: Memory | None = None
    notes: tuple[str, ...] = field(default=())
    # The CPUs this process may run on (None: unknown, all of them).
    allowed_cpus: frozenset[int] | None = None


def parse_meminfo(text: str) -> Memory | None:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0])
    total = values.get("MemTotal")
    if total is None:
        return None
    return Memory(total_kib=total, available_kib=values.get("MemAvailable"))


def read_numa(sources: HostSources, allowed: frozenset[int] | None) -> tuple[NumaNode, ...] | None:
    """NUMA nodes that hold allowed CPUs; None when the kernel exposes no NUMA information."""
    base = sources.root / "sys/devices/system/node"
    try:
        entries = sorted(base.glob("node[0-9]*"), key=lambda p: int(p.name[4:]))
    except OSError:
        return None
    nodes: list[NumaNode] = []
    for entry in entries:
        try:
            text = (entry / "cpulist").read_text(encoding="utf-8")
        except OSError:
            continue
        cpus = parse_cpulist(text)
        if allowed is not None:
            cpus = cpus & allowed
        if cpus:
            nodes.append(NumaNode(id=int(entry.name[4:]), cpus=cpus))
    return tuple(nodes) if nodes else None


def probe(sources: HostSources) -> HostFacts:
    """Everything the launcher and the doctor need to know about the host."""
    notes: list[str] = []
    query = sources.run(NVIDIA_SMI_QUERY)
    gpus = tuple(parse_gpu_query(query)) if query else ()
    banner = sources.run(NVIDIA_SMI_BANNER) if gpus else None
    allowed = sources.affinity()
    cpuinfo = sources.read("proc/cpuinfo")
    cpu = cpu_facts(parse_cpuinfo(cpuinfo), allowed) if cpuinfo else None
    if cpu is not None and not cpu.topology_known:
        notes.append("/proc/cpuinfo has no core ids: every logical CPU counted as a core")
    meminfo = sources.read("proc/meminfo")
    return HostFacts(
        gpus=gpus,
        cuda_version=parse_cuda_version(banner) if banner else None,
        cpu=cpu,
        numa=read_numa(sources, allowed),
        memory=parse_meminfo(meminfo) if meminfo else None,
        notes=tuple(notes),
        allowed_cpus=allowed,
    )
