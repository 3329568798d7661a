"""Load single files, or single functions, from the unzipped sglang-kt wheel.

Importing through `sglang` would run its package `__init__` (the whole frontend); the files
the kernels copy need only torch (and triton), so they are loaded by path under private
names. A function inside a module that needs CUDA-only packages is compiled on its own from
the file's source, without its decorators (e.g. `torch.compile`), in a namespace that holds
only what it uses.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import torch


class WheelCode:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, module: str) -> Path:
        return self.root / (module.replace(".", "/") + ".py")

    def module(self, module: str) -> types.ModuleType:
        """Execute one wheel file as a standalone module (cached per session)."""
        name = "wheel_" + module.replace(".", "_")
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, self.path(module))
        assert spec is not None
        assert spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod

    def function(self, module: str, name: str, namespace: dict[str, Any] | None = None) -> Any:
        """Compile one top-level function of a wheel file, decorators dropped."""
        tree = ast.parse(self.path(module).read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                node.decorator_list = []
                code = compile(
                    ast.Module(body=[node], type_ignores=[]), str(self.path(module)), "exec"
                )
                scope: dict[str, Any] = {"torch": torch, "Optional": Any, **(namespace or {})}
                exec(code, scope)
                return scope[name]
        raise LookupError(f"{name} not found in {module}")
