"""Parsing what the host reports: /proc/cpuinfo, CPU lists, nvidia-smi, /proc/meminfo."""

from __future__ import annotations

from typing import get_args

from engine.launch.cpu import VARIANT_NAMES, cpu_facts, parse_cpuinfo, parse_cpulist
from engine.launch.gpu import parse_cuda_version, parse_gpu_query
from engine.launch.host import parse_meminfo
from engine.launch.profile import KtVariant
from tests.engine.fixtures.hosts import HOPPER, HOSTS, REFERENCE


def test_verbatim_cpuinfo_of_a_two_vcpu_vm() -> None:
    processors = parse_cpuinfo((HOSTS / HOPPER / "cpuinfo").read_text())
    facts = cpu_facts(processors, allowed=None)
    assert facts is not None
    assert facts.logical_cpus == 2
    assert facts.physical_cores == 2
    assert facts.sockets == 1
    assert facts.avx512_bf16
    assert facts.amx
    assert facts.kt_variant == "amx"
    # "avx512vbmi" is the kernel's spelling; kt-kernel's requirement reads "avx512_vbmi".
    assert facts.has("avx512_vbmi")


def test_affinity_limits_what_counts() -> None:
    text = "".join(
        f"processor\t: {n}\nphysical id\t: 0\ncore id\t\t: {n % 4}\nflags\t\t: avx2 avx512f\n\n"
        for n in range(8)
    )
    processors = parse_cpuinfo(text)
    all_cpus = cpu_facts(processors, allowed=None)
    assert all_cpus is not None
    assert all_cpus.physical_cores == 4
    assert all_cpus.kt_variant == "avx2"  # avx512f alone is not avx512_base (needs bw too)
    pinned = cpu_facts(processors, allowed=frozenset({0, 4}))
    assert pinned is not None
    assert (pinned.logical_cpus, pinned.physical_cores) == (2, 1)
    assert cpu_facts(processors, allowed=frozenset({99})) is None


def test_cpuinfo_without_topology_counts_logical_cpus() -> None:
    facts = cpu_facts(parse_cpuinfo("processor : 0\nflags : avx2\n\nprocessor : 1\n"), None)
    assert facts is not None
    assert facts.physical_cores == 2
    assert not facts.topology_known
    assert facts.flags == frozenset()  # processor 1 lists no flags: only common flags count


def test_cpulist() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert parse_cpulist("\n") == frozenset()


def test_nvidia_smi_outputs() -> None:
    gpus = parse_gpu_query((HOSTS / REFERENCE / "nvidia-smi-query.csv").read_text())
    assert len(gpus) == 1
    assert gpus[0].compute_capability == (12, 0)
    assert gpus[0].sm == "sm_120"
    assert gpus[0].memory_mib == 97887
    assert parse_gpu_query("garbage\n0, A, x.y, 1, 2\n") == []
    assert parse_cuda_version((HOSTS / REFERENCE / "nvidia-smi.txt").read_text()) == (13, 2)
    assert parse_cuda_version("no version here") is None


def test_meminfo() -> None:
    memory = parse_meminfo((HOSTS / REFERENCE / "meminfo").read_text())
    assert memory is not None
    assert memory.total_kib == 1584843220
    assert memory.available_kib == 1561204884
    assert parse_meminfo("MemFree: 1 kB\n") is None


def test_profile_variant_names_match_kt_kernel() -> None:
    assert set(get_args(KtVariant)) == {"auto", *VARIANT_NAMES}
