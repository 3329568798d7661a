"""Import the unzipped sglang-kt wheel on a CPU-only test machine.

The wheel's modules import CUDA-only and serving-only packages at module level (sgl_kernel,
transformers, zmq, ...). None of that code runs in these tests, so those packages are
replaced by permissive stand-ins for the duration of the test package, and everything is
removed again afterwards so other test directories never see it.

On a CUDA host without sglang-kt installed (`on_device=True`, see device_run.py) the same
stand-ins cover the serving-only packages, but the wheel's Triton kernels compile for the GPU
and the packages its KDA path computes with (einops) are the real ones.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Iterator, Sequence
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

# Stubbed on a CPU, where the code using them never runs; real on a GPU, where it does.
COMPUTE_PACKAGES = ("einops",)

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

    def __init__(self, real: tuple[str, ...] = ()) -> None:
        self.stubbed = frozenset(STUBBED_PACKAGES) - frozenset(real)

    def find_spec(
        self, fullname: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.stubbed:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: ModuleType) -> None:
        for key, value in self._OVERRIDES.get(module.__name__, {}).items():
            setattr(module, key, value)


# Serving packages the wheel imports at module level that the test virtualenv installs (so
# the CPU tests import them for real) and a bare CUDA host may lack. Anything else missing
# still raises ImportError, as it does on the CPU, so the wheel's optional imports agree.
SERVING_PACKAGES = (
    "aiohttp",
    "annotated_types",
    "jsonschema",
    "openai",
    "opentelemetry",
    "orjson",
    "pydantic",
    "pydantic_core",
    "setproctitle",
    "starlette",
    "typing_inspection",
    "uvicorn",
    "fastapi",
    "yaml",
    # CUDA-only kernel packages the wheel imports once it sees a GPU; none runs in the check.
    "flashinfer",
)


class _MissingFinder(_StandInFinder):
    """Last on sys.meta_path: stand-ins for the SERVING_PACKAGES this host does not have."""

    def __init__(self) -> None:
        super().__init__()
        self.stood_in: list[str] = []

    def find_spec(
        self, fullname: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.split(".")[0]
        if top not in SERVING_PACKAGES:
            return None
        if top not in self.stood_in:
            self.stood_in.append(top)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)


def _skip_stood_in_ops(register_fake: Any) -> Any:
    def register(op: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(op, str) and op.split("::")[0] in STUBBED_PACKAGES:
            return lambda fn=None: fn
        return register_fake(op, *args, **kwargs)

    return register


# Our modules that import sglang at their top; they must not outlive the wheel's modules.
WHEEL_DEPENDENTS = ("engine.patches.prefix_cache.kda", "engine.patches.prefix_cache.tree")


def _owned(name: str, extra: Sequence[str] = ()) -> bool:
    top = name.split(".")[0]
    return top == "sglang" or top in STUBBED_PACKAGES or top in extra or name in WHEEL_DEPENDENTS


@contextmanager
def wheel_on_path(root: Path, *, on_device: bool = False) -> Iterator[None]:
    """sglang from `root` importable (and imported) inside the block, gone after it."""
    # Whatever another test package left behind is set aside and put back afterwards.
    foreign = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _owned(n)]}
    finder = _StandInFinder(COMPUTE_PACKAGES if on_device else ())
    capability = torch.cuda.get_device_capability
    interpret = os.environ.get("TRITON_INTERPRET")
    missing = _MissingFinder()
    sys.meta_path.insert(0, finder)
    sys.path.insert(0, str(root))
    register_fake = torch.library.register_fake
    if on_device:
        # Last, so installed packages win.
        sys.meta_path.append(missing)
        # With CUDA present the wheel registers fake kernels for sgl_kernel's ops at import;
        # sgl_kernel is a stand-in here, so those ops do not exist and are never called.
        torch.library.register_fake = _skip_stood_in_ops(register_fake)
    else:
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
        if missing.stood_in:
            print(f"stand-ins for packages this host lacks: {', '.join(missing.stood_in)}")
        yield
    finally:
        for name in [n for n in sys.modules if _owned(n, missing.stood_in)]:
            del sys.modules[name]
        sys.modules.update(foreign)
        sys.meta_path.remove(finder)
        if missing in sys.meta_path:
            sys.meta_path.remove(missing)
        sys.path.remove(str(root))
        torch.cuda.get_device_capability = capability
        torch.library.register_fake = register_fake
        if interpret is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = interpret
