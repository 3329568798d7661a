"""CPU facts from /proc/cpuinfo text: ISA flags, sockets, physical cores, kt-kernel variant."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# kt-kernel's CPU variants, weakest first, with the flags each one needs (kt_kernel/_cpu_detect.py
# in kt-kernel 0.7.2). The launcher picks the same variant kt-kernel would, but from every
# processor's flags rather than only the first one, and passes it explicitly so the choice is
# logged and can be overridden in the profile.
KT_VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("avx2", ("avx2",)),
    ("avx512_base", ("avx512f", "avx512bw")),
    ("avx512_vnni", ("avx512f", "avx512bw", "avx512_vnni")),
    ("avx512_vbmi", ("avx512f", "avx512bw", "avx512_vnni", "avx512_vbmi")),
    ("avx512_bf16", ("avx512f", "avx512bw", "avx512_vnni", "avx512_vbmi", "avx512_bf16")),
    (
        "amx",
        (
            "avx512f",
            "avx512bw",
            "avx512_vnni",
            "avx512_vbmi",
            "avx512_bf16",
            "amx_tile",
            "amx_int8",
            "amx_bf16",
        ),
    ),
)
VARIANT_NAMES: tuple[str, ...] = tuple(name for name, _ in KT_VARIANTS)


def variant_level(name: str) -> int:
    """Rank of a kt-kernel variant (higher needs a newer ISA); ValueError for unknown names."""
    return VARIANT_NAMES.index(name)


@dataclass(frozen=True)
class Processor:
    """One logical CPU as /proc/cpuinfo lists it."""

    number: int
    socket: int | None
    core: int | None
    flags: frozenset[str]
    model_name: str


@dataclass(frozen=True)
class CpuFacts:
    """The CPU side of a host, restricted to the CPUs this process may run on."""

    model_name: str
    logical_cpus: int
    physical_cores: int
    sockets: int
    flags: frozenset[str]
    topology_known: bool

    def has(self, flag: str) -> bool:
        # The kernel spells some flags without the underscore (avx512vbmi, avx512vnni).
        return flag in self.flags or flag.replace("_", "") in self.flags

    @property
    def avx512_bf16(self) -> bool:
        return self.has("avx512_bf16")

    @property
    def amx(self) -> bool:
        return all(self.has(f) for f in ("amx_tile", "amx_int8", "amx_bf16"))

    @property
    def kt_variant(self) -> str:
        """The best kt-kernel variant every allowed CPU supports ("avx2" as the floor)."""
        best = "avx2"
        for name, needs in KT_VARIANTS:
            if all(self.has(f) for f in needs):
                best = name
        return best


def parse_cpuinfo(text: str) -> list[Processor]:
    """Split /proc/cpuinfo into processors; blocks without a `processor` line are skipped."""
    processors: list[Processor] = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip().lower(), value.strip())
        number = _int(fields.get("processor"))
        if number is None:
            continue
        processors.append(
            Processor(
                number=number,
                socket=_int(fields.get("physical id")),
                core=_int(fields.get("core id")),
                flags=frozenset(fields.get("flags", "").lower().split()),
                model_name=fields.get("model name", "unknown CPU"),
            )
        )
    return processors


def cpu_facts(processors: Iterable[Processor], allowed: frozenset[int] | None) -> CpuFacts | None:
    """Summarise processors; `allowed` (CPU affinity, None = all) limits what counts.

    Physical cores are distinct (physical id, core id) pairs: SMT siblings share a core and
    KTransformers wants one worker thread per core, not per hardware thread.
    """
    chosen = [p for p in processors if allowed is None or p.number in allowed]
    if not chosen:
        return None
    topology_known = all(p.socket is not None and p.core is not None for p in chosen)
    if topology_known:
        cores = len({(p.socket, p.core) for p in chosen})
        sockets = len({p.socket for p in chosen})
    else:
        # Some VMs omit the topology lines: every logical CPU then counts as a core.
        cores = len(chosen)
        sockets = 1
    flags = frozenset.intersection(*(p.flags for p in chosen))
    return CpuFacts(
        model_name=chosen[0].model_name,
        logical_cpus=len(chosen),
        physical_cores=cores,
        sockets=sockets,
        flags=flags,
        topology_known=topology_known,
    )


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse the kernel's CPU list format ("0-127,256-383"); empty text is an empty set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        start = int(first)
        cpus.update(range(start, int(last) + 1) if last else (start,))
    return frozenset(cpus)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None
