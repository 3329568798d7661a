"""GPU facts from nvidia-smi output."""

from __future__ import annotations

import re
from dataclasses import dataclass

# One CSV row per GPU; the parser below reads the columns in this order.
NVIDIA_SMI_QUERY: tuple[str, ...] = (
    "nvidia-smi",
    "--query-gpu=index,name,compute_cap,memory.total,driver_version",
    "--format=csv,noheader,nounits",
)
# The plain banner is the only place nvidia-smi states the CUDA version the driver supports.
NVIDIA_SMI_BANNER: tuple[str, ...] = ("nvidia-smi",)

_CUDA_VERSION = re.compile(r"CUDA Version:\s*([0-9]+(?:\.[0-9]+)*)")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: tuple[int, int]
    memory_mib: int
    driver: str

    @property
    def sm(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def capability_text(self) -> str:
        return "{}.{}".format(*self.compute_capability)


def parse_capability(text: str) -> tuple[int, int]:
    """ "12.0" -> (12, 0); ValueError on anything else."""
    major, sep, minor = text.strip().partition(".")
    if not sep:
        raise ValueError(f"not a compute capability: {text!r}")
    return int(major), int(minor)


def parse_gpu_query(text: str) -> list[Gpu]:
    """Parse the CSV of NVIDIA_SMI_QUERY; rows that do not parse are skipped."""
    gpus: list[Gpu] = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != 5:
            continue
        index, name, capability, memory, driver = cells
        try:
            gpus.append(
                Gpu(
                    index=int(index),
                    name=name,
                    compute_capability=parse_capability(capability),
                    memory_mib=int(float(memory)),
                    driver=driver,
                )
            )
        except ValueError:
            continue
    return gpus


def parse_cuda_version(banner: str) -> tuple[int, int] | None:
    """The driver's CUDA version from the nvidia-smi banner, e.g. (12, 8)."""
    match = _CUDA_VERSION.search(banner)
    if match is None:
        return None
    parts = [int(p) for p in match.group(1).split(".")] + [0]
    return parts[0], parts[1]
