"""Shared checks: bf16 ulp distance, relative error, and source mutants of a kernel module."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import torch

TOKENS = (1, 2, 4, 8)
# 1000 is the non-power-of-two hidden size (masked tails in every kernel).
HIDDEN = (64, 512, 4096, 1000)
HC_MULT = 4


def bf16_ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance between two bf16 tensors in units in the last place."""

    def ordered(t: torch.Tensor) -> torch.Tensor:
        bits = t.to(torch.bfloat16).view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return int((ordered(a) - ordered(b)).abs().max())


def bf16_ulp(t: torch.Tensor) -> torch.Tensor:
    """Spacing of bf16 values at each element of `t` (fp32 tensor)."""
    _, exponent = torch.frexp(t.float().abs().clamp_min(2.0**-126))
    return torch.ldexp(torch.ones_like(t, dtype=torch.float32), exponent - 8)


def max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.double(), b.double()
    return float(((a64 - b64).abs() / b64.abs().clamp_min(1e-30)).max())


def mutant(module_file: Path, tmp_dir: Path, old: str, new: str) -> types.ModuleType:
    """Import a copy of a kernel module with one source edit (exactly one occurrence)."""
    source = module_file.read_text()
    assert source.count(old) == 1, f"mutation target not unique in {module_file.name}: {old!r}"
    path = tmp_dir / f"mutant_{module_file.stem}_{abs(hash(new)) % 10**8}.py"
    path.write_text(source.replace(old, new))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
