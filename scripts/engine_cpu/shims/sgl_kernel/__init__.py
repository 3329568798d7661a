"""Test-only stand-in for the `sgl_kernel` package's entry point (never copied into an image).

Stands in for: the `__init__` of the CUDA kernel library sglang-kt installs as `sgl_kernel`.
That `__init__` loads `common_ops`, a CUDA extension whose payload is absent on a host without
CUDA, so the import fails; yet sglang-kt imports names from `sgl_kernel` at module level in
code its CPU path loads too. This package takes the installed one's place without loading
any library: its submodules (pure Python wrappers around `torch.ops.sgl_kernel.*`, looked up
when called) load from the installed package's directory, and the names the installed
`__init__` re-exports resolve lazily from those submodules, or to a stub that raises when
called when a submodule needs a CUDA extension. sglang-kt's CPU layers probe
`torch.ops.sgl_kernel.*` for their CPU ops and find none here, so they take their torch
paths; the ops the hybrid model calls without a probe are registered in torch by
`sgl_kernel_cpu_ops` (imported by sitecustomize).
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__version__ = "0.0.0+flashbox-cpu-shim"

_HERE = Path(__file__).resolve().parent


def _installed_dir() -> Path | None:
    """The real sgl_kernel package directory further down sys.path, if any."""
    others = [p for p in sys.path if Path(p or ".").resolve() != _HERE.parent]
    spec = importlib.machinery.PathFinder.find_spec(__name__, others)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _reexports(init: Path) -> dict[str, str]:
    """name -> submodule, from the installed `__init__`'s `from sgl_kernel.X import ...`."""
    names: dict[str, str] = {}
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(__name__ + "."):
            for alias in node.names:
                names[alias.asname or alias.name] = node.module or ""
    return names


def _stub(qualname: str) -> Callable[..., Any]:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{qualname}: a CUDA kernel, absent on the CPU shim")

    missing.__name__ = qualname.rsplit(".", 1)[-1]
    missing.__qualname__ = qualname
    return missing


_INSTALLED = _installed_dir()
__path__ = [str(_INSTALLED)] if _INSTALLED is not None else []
_NAMES = _reexports(_INSTALLED / "__init__.py") if _INSTALLED is not None else {}


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    module = _NAMES.get(name)
    value: Any = None
    if module is not None:
        try:
            value = getattr(importlib.import_module(module), name)
        except (ImportError, OSError, AttributeError, RuntimeError):
            value = None
    if value is None:
        value = _stub(f"{__name__}.{name}")
    globals()[name] = value
    return value
