"""Run a callback right after a module is imported, without importing it ourselves.

`install()` runs at interpreter start in every engine process; importing sglang there would
load the whole engine into every Python process of the image. Instead each seam is patched
when sglang itself first imports the module that holds it (or at once, if already loaded).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]


class _Loader(importlib.abc.Loader):
    """Delegates to the real loader, then fires the watcher's callbacks for the module."""

    def __init__(self, inner: importlib.abc.Loader, finder: PostImportFinder) -> None:
        self._inner = inner
        self._finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._finder.fire(module)

    def __getattr__(self, name: str) -> Any:
        # get_source, get_filename, is_package...: tracebacks and inspect keep working.
        return getattr(self._inner, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """A meta-path finder that only wraps the loaders of the modules it watches."""

    def __init__(self) -> None:
        self._hooks: dict[str, list[Callback]] = {}

    def watch(self, name: str, callback: Callback) -> None:
        self._hooks.setdefault(name, []).append(callback)

    def watching(self) -> list[str]:
        return sorted(self._hooks)

    def fire(self, module: ModuleType) -> None:
        # Popped only when the module really ran: a bare find_spec (e.g. a sha256 check)
        # must not use up the hooks.
        for callback in self._hooks.pop(module.__name__, []):
            callback(module)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: importlib.machinery.ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, self)
                return spec
        return None


def when_imported(name: str, callback: Callback, finder: PostImportFinder) -> None:
    """Call `callback(module)` now if `name` is loaded, else right after its first import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    finder.watch(name, callback)
    if finder not in sys.meta_path:
        sys.meta_path.insert(0, finder)
