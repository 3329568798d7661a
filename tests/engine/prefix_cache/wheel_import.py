"""Import the unzipped sglang-kt wheel on a CPU-only test machine.

The wheel's modules import CUDA-only and serving-only packages at module level (sgl_kernel,
transformers, zmq, ...). None of that code runs in these tests, so those packages are
replaced by permissive stand-ins for the duration of the test package, and everything is
removed again afterwards so other test directories never see it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import torch

# Top-level packages the wheel imports but these tests never exercise.
STUBBED_PACKAGES = (
    "IPython",
    "deep_gemm",
    "dill",
    "einops",
    "gguf",
    "huggingface_hub",
    "loguru",
    "msgspec",
    "partial_json_parser",
    "pybase64",
    "regex",
    "requests",
    "safetensors",
    "sentencepiece",
    "sgl_kernel",
    "torchvision",
    "tqdm",
    "transformers",
    "zmq",
)

# The wheel modules the tests use; importing them up front keeps failures in one place.
WHEEL_MODULES = (
    "sglang.srt.server_args",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.allocator",
    "sglang.srt.mem_cache.mamba_radix_cache",
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.managers.schedule_policy",
    "sglang.srt.managers.scheduler",
    "sglang.srt.layers.attention.hybrid_linear_attn_backend",
    "sglang.srt.layers.attention.linear.glm5_next_kda_backend",
    "sglang.srt.layers.attention.fla.kda",
    "sglang.srt.layers.attention.nsa.kpool_plan",
)


class _StandInMeta(type):
    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any) -> Any:
        return super().__new__(mcls, name, bases, ns)

    def __init__(cls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any) -> None:
        super().__init__(name, bases, ns)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in(name)

    def __getitem__(cls, item: object) -> Any:
        return cls

    def __setitem__(cls, key: object, value: object) -> None:
        return None

    def __contains__(cls, key: object) -> bool:
        return False

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __or__(cls, other: object) -> Any:
        return cls

    def __ror__(cls, other: object) -> Any:
        return cls


class _StandIn(metaclass=_StandInMeta):
    """Any attribute, subclassable, callable; used as a decorator it returns the function."""

    def __init_subclass__(cls, **kw: Any) -> None:
        return None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in(name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _StandIn()

    def __getitem__(self, key: object) -> Any:
        return _StandIn()

    def __setitem__(self, key: object, value: object) -> None:
        return None

    def __contains__(self, key: object) -> bool:
        return False

    def __iter__(self) -> Iterator[Any]:
        return iter(())


def _stand_in(name: str) -> Any:
    return _StandInMeta(name, (_StandIn,), {})


class _StandInModule(ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stand_in(name)
        setattr(self, name, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    # dill must serialise to bytes: sglang hex-encodes a pickled class at import.
    _OVERRIDES: ClassVar[dict[str, dict[str, Any]]] = {
        "dill": {"dumps": lambda *a, **k: b"", "loads": lambda *a, **k: None},
    }

    def find_spec(
        self, fullname: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in STUBBED_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: ModuleType) -> None:
        for key, value in self._OVERRIDES.get(module.__name__, {}).items():
            setattr(module, key, value)


# Our modules that import sglang at their top; they must not outlive the wheel's modules.
WHEEL_DEPENDENTS = ("engine.patches.prefix_cache.kda", "engine.patches.prefix_cache.tree")


def _owned(name: str) -> bool:
    top = name.split(".")[0]
    return top == "sglang" or top in STUBBED_PACKAGES or name in WHEEL_DEPENDENTS


@contextmanager
def wheel_on_path(root: Path) -> Iterator[None]:
    """sglang from `root` importable (and imported) inside the block, gone after it."""
    # Whatever another test package left behind is set aside and put back afterwards.
    foreign = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _owned(n)]}
    finder = _StandInFinder()
    capability = torch.cuda.get_device_capability
    interpret = os.environ.get("TRITON_INTERPRET")
    sys.meta_path.insert(0, finder)
    sys.path.insert(0, str(root))
    # fp8.py asks for the GPU's capability at import; answer as the target host (sm_120).
    torch.cuda.get_device_capability = lambda *a, **k: (12, 0)
    # Small Triton helpers (the track-slot copy) then run on CPU tensors.
    os.environ["TRITON_INTERPRET"] = "1"
    # sglang/__init__.py pulls in the whole frontend; the srt modules do not need it.
    package = ModuleType("sglang")
    package.__path__ = [str(root / "sglang")]
    sys.modules["sglang"] = package
    try:
        for name in WHEEL_MODULES:
            importlib.import_module(name)
        yield
    finally:
        for name in [n for n in sys.modules if _owned(n)]:
            del sys.modules[name]
        sys.modules.update(foreign)
        sys.meta_path.remove(finder)
        sys.path.remove(str(root))
        torch.cuda.get_device_capability = capability
        if interpret is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = interpret
