"""Reversible attribute patches applied when (or as soon as) their target module is imported.

The engine image loads our patches from a `.pth` line at interpreter start, long before sglang
is imported, and most Python processes in the image never import sglang at all. So nothing here
imports sglang: a patch is attached to a module name and runs right after that module executes
for the first time (or at once, when it is already imported).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

log = logging.getLogger("flashbox.engine.patches")

ModulePatch = Callable[[ModuleType, "Patcher"], None]


@dataclass
class Patcher:
    """Records every attribute it replaces so that `undo` restores the stock objects exactly."""

    _saved: list[tuple[object, str, bool, object]] = field(default_factory=list)

    def replace(self, owner: object, name: str, value: object) -> None:
        own = vars(owner)
        self._saved.append((owner, name, name in own, own.get(name)))
        setattr(owner, name, value)

    def undo(self) -> None:
        while self._saved:
            owner, name, had, old = self._saved.pop()
            if had:
                setattr(owner, name, old)
            else:
                delattr(owner, name)

    @property
    def count(self) -> int:
        return len(self._saved)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, after: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._after(module)


class ImportPatches(importlib.abc.MetaPathFinder):
    """Runs each module's patches once, right after the module body has executed."""

    def __init__(
        self,
        patches: dict[str, Sequence[ModulePatch]],
        patcher: Patcher,
        ready: Callable[[], bool],
    ) -> None:
        self._pending = dict(patches)
        self._patcher = patcher
        # `ready` runs the source check; it is evaluated once, at the first target import.
        self._ready = ready
        self._verdict: bool | None = None
        self._busy = False

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._pending or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, self._apply)
        return spec

    def _apply(self, module: ModuleType) -> None:
        if self._verdict is None:
            self._busy = True
            try:
                self._verdict = self._ready()
            finally:
                self._busy = False
        fns = self._pending.pop(module.__name__, ())
        if not self._verdict:
            return
        for fn in fns:
            try:
                fn(module, self._patcher)
            except Exception:
                # A patch that half-applied is worse than none: undo everything and stop.
                log.exception("%s: patch failed, all prefix-cache patches undone", module.__name__)
                self._patcher.undo()
                self._verdict = False
                return

    def apply_loaded(self) -> None:
        """Patch the targets that were imported before this finder was installed."""
        for name in [n for n in self._pending if n in sys.modules]:
            self._apply(sys.modules[name])

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self._pending.clear()


@dataclass
class Installation:
    """What an `install()` did; `undo()` puts the stock objects back (tests, diagnostics)."""

    active: bool
    reason: str
    patcher: Patcher = field(default_factory=Patcher)
    finder: ImportPatches | None = None

    def undo(self) -> None:
        if self.finder is not None:
            self.finder.uninstall()
        self.patcher.undo()


def install_on_import(
    patches: dict[str, Sequence[ModulePatch]],
    ready: Callable[[], bool],
) -> Installation:
    patcher = Patcher()
    finder = ImportPatches(patches, patcher, ready)
    sys.meta_path.insert(0, finder)
    finder.apply_loaded()
    return Installation(active=True, reason="installed", patcher=patcher, finder=finder)


def original(obj: Any, name: str) -> Any:
    """The attribute as defined on `obj` itself (not inherited), for wrappers to call."""
    return vars(obj)[name]
