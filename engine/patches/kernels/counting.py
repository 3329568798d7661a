"""Count what one call launches: non-view torch ops (about one GPU kernel each) and Triton
kernel launches. Runs on a CPU, so "before"/"after" launch counts need no GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

# Allocations and metadata-only ops launch no kernel.
_NOT_KERNELS = frozenset(
    {
        "empty",
        "empty_strided",
        "empty_like",
        "lift_fresh",
        "detach",
        "_unsafe_view",
        "promote_types",
    }
)


class _State:
    """Shared by both counters: torch ops inside a Triton launch are the interpreter's
    own host copies, not kernels of the code under count."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.in_triton = 0


class _OpCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, state: _State) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._state = state

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = func.overloadpacket.__name__
        if not self._state.in_triton and not func.is_view and name not in _NOT_KERNELS:
            self._state.counts[f"aten.{name}"] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def _count_triton(state: _State) -> Iterator[None]:
    """Wrap both the interpreter's and the compiler's launch entry points."""
    from triton.runtime import interpreter, jit  # type: ignore[import-untyped]

    originals: list[tuple[Any, Any]] = []
    for cls in (interpreter.InterpretedFunction, jit.JITFunction):
        run = cls.run

        def counted(self: Any, *args: Any, _run: Any = run, **kwargs: Any) -> Any:
            if not kwargs.get("warmup", False):
                state.counts[f"triton.{getattr(self, '__name__', 'kernel')}"] += 1
            state.in_triton += 1
            try:
                return _run(self, *args, **kwargs)
            finally:
                state.in_triton -= 1

        originals.append((cls, run))
        cls.run = counted
    try:
        yield
    finally:
        for cls, run in originals:
            cls.run = run


def count_launches(fn: Callable[[], object]) -> Counter[str]:
    """Run `fn` once and return its launches by name (`aten.*` ops, `triton.*` kernels)."""
    state = _State()
    with _count_triton(state), _OpCounter(state):
        fn()
    return state.counts
