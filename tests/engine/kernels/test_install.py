"""Wiring: the seams are swapped only behind matching sha256s and their switches."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.patches.kernels import seams
from engine.patches.kernels import wiring as inst
from engine.patches.kernels.post_import import PostImportFinder
from engine.patches.kernels.settings import KernelSettings
from tests.engine.kernels.wheel import WheelCode


@pytest.fixture
def clean_modules() -> Iterator[None]:
    """Leave sglang's entries in sys.modules, sys.meta_path and sys.path as they were."""
    modules = {n: m for n, m in sys.modules.items() if n == "sglang" or n.startswith("sglang.")}
    meta_path = list(sys.meta_path)
    path = list(sys.path)
    yield
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        del sys.modules[name]
    sys.modules.update(modules)
    sys.meta_path[:] = meta_path
    sys.path[:] = path


def _stand_in(wheel: WheelCode, name: str, **attrs: Any) -> types.ModuleType:
    """A module registered under the wheel's name whose spec points at the wheel's file,
    so the sha256 check reads the real source; it holds only the seam attributes."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.util.spec_from_file_location(name, wheel.path(name))
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def _original(*args: Any, **kwargs: Any) -> str:
    return "wheel"


def _backend_class() -> type:
    """A fresh class per test: installing patches the class attribute in place."""

    class Backend:
        def forward_decode(self, *args: Any, **kwargs: Any) -> str:
            return "wheel"

    return Backend


def test_pinned_hashes_are_the_unzipped_wheels(wheel: WheelCode) -> None:
    for module, digest in inst.WHEEL_SHA256.items():
        assert hashlib.sha256(wheel.path(module).read_bytes()).hexdigest() == digest, module


def _dependencies(wheel: WheelCode) -> None:
    for name in (
        inst.COMMUNICATOR_MHC,
        inst.GLM5_NEXT_NORM,
        inst.KDA_OPS,
        inst.CONV_TRITON,
        inst.INDEXER_KPOOL,
    ):
        _stand_in(wheel, name)


def test_every_seam_installs_once(wheel: WheelCode, clean_modules: None) -> None:
    _dependencies(wheel)
    mhc = _stand_in(wheel, inst.MHC, hc_pre=_original)
    glm = _stand_in(wheel, inst.GLM5_NEXT, _glm5_next_hc_post=_original)
    topk = _stand_in(wheel, inst.TOPK, biased_grouped_topk=_original)
    backend = _backend_class()
    original_decode = backend.forward_decode  # type: ignore[attr-defined]
    kda = _stand_in(wheel, inst.KDA_BACKEND, Glm5NextKDAAttnBackend=backend)
    idx = _stand_in(wheel, inst.INDEXER_LOGITS, iter_glm5_next_eager_fp8_mqa_logits=_original)
    env = {"FLASHBOX_INDEXER_QUERY_CHUNK": "256"}
    names = inst.install(env)
    assert names == ["hc_pre", "hc_post", "gate_topk", "kda_decode", "indexer_query_chunk"]
    patched = [
        mhc.hc_pre,
        glm._glm5_next_hc_post,
        topk.biased_grouped_topk,
        kda.Glm5NextKDAAttnBackend.forward_decode,
        idx.iter_glm5_next_eager_fp8_mqa_logits,
    ]
    assert [getattr(p, seams.MARKER) for p in patched] == names
    inst.install(env)  # idempotent: no double wrapping
    assert mhc.hc_pre.__wrapped__ is _original
    assert kda.Glm5NextKDAAttnBackend.forward_decode.__wrapped__ is original_decode
    inst.uninstall_all()
    assert mhc.hc_pre is _original
    assert topk.biased_grouped_topk is _original
    assert backend.forward_decode is original_decode  # type: ignore[attr-defined]


def test_switches_turn_kernels_off(wheel: WheelCode, clean_modules: None) -> None:
    _dependencies(wheel)
    mhc = _stand_in(wheel, inst.MHC, hc_pre=_original)
    glm = _stand_in(wheel, inst.GLM5_NEXT, _glm5_next_hc_post=_original)
    assert inst.install({"FLASHBOX_KERNEL_HC_PRE": "0"}) == ["hc_post", "gate_topk", "kda_decode"]
    assert mhc.hc_pre is _original
    assert getattr(glm._glm5_next_hc_post, seams.MARKER) == "hc_post"
    assert inst.install({"FLASHBOX_KERNELS": "off"}) == []


def test_refuses_other_sources(
    wheel: WheelCode, clean_modules: None, caplog: pytest.LogCaptureFixture
) -> None:
    _dependencies(wheel)
    mhc = _stand_in(wheel, inst.MHC, hc_pre=_original)
    wrong = dict(inst.WHEEL_SHA256)
    wrong[inst.COMMUNICATOR_MHC] = "0" * 64
    with caplog.at_level(logging.WARNING):
        inst.install({}, expected=wrong)
    assert mhc.hc_pre is _original
    assert "kernel hc_pre: not applied" in caplog.text


def test_waits_for_sglang_to_import_the_module(
    wheel: WheelCode, clean_modules: None, tmp_path: Path
) -> None:
    """The real mhc.py, found on sys.path as sglang would: patched when imported."""
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        del sys.modules[name]
    target = tmp_path / "sglang" / "kernels" / "ops" / "layernorm"
    target.mkdir(parents=True)
    shutil.copy(wheel.path(inst.MHC), target / "mhc.py")
    for dep in (inst.COMMUNICATOR_MHC, inst.GLM5_NEXT_NORM):
        dest = tmp_path / (dep.replace(".", "/") + ".py")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel.path(dep), dest)
    sys.path.insert(0, str(tmp_path))
    inst.install(
        {
            "FLASHBOX_KERNEL_HC_POST": "0",
            "FLASHBOX_KERNEL_GATE_TOPK": "0",
            "FLASHBOX_KERNEL_KDA_DECODE": "0",
        }
    )
    assert inst.MHC not in sys.modules
    assert any(isinstance(f, PostImportFinder) for f in sys.meta_path)
    mhc = importlib.import_module(inst.MHC)
    assert getattr(mhc.hc_pre, seams.MARKER) == "hc_pre"
    # On CPU tensors the replacement hands over to the wheel's own function, unchanged.
    x = torch.randn(2, 4 * 64).bfloat16()
    args = (x, torch.randn(24, 256), torch.rand(3), torch.randn(24), 4, 1e-6, 1e-6, 20)
    for got, want in zip(mhc.hc_pre(*args), mhc.hc_pre.__wrapped__(*args), strict=True):
        assert torch.equal(got, want) if isinstance(got, torch.Tensor) else got == want


def test_settings_bounds() -> None:
    assert KernelSettings.from_env({}) == KernelSettings()
    s = KernelSettings.from_env(
        {"FLASHBOX_INDEXER_QUERY_CHUNK": "512", "FLASHBOX_KERNEL_HC_PRE_MAX_TOKENS": "16"}
    )
    assert s.indexer_query_chunk == 512
    assert s.hc_pre_max_tokens == 16
    assert (
        KernelSettings.from_env({"FLASHBOX_INDEXER_QUERY_CHUNK": "0"}).indexer_query_chunk is None
    )
    assert (
        KernelSettings.from_env({"FLASHBOX_INDEXER_QUERY_CHUNK": "99999"}).indexer_query_chunk
        is None
    )
    assert (
        KernelSettings.from_env({"FLASHBOX_INDEXER_QUERY_CHUNK": "x"}).indexer_query_chunk is None
    )
    assert not KernelSettings.from_env({"FLASHBOX_KERNEL_GATE_TOPK": "no"}).gate_topk


def test_install_at_start_up_imports_nothing_heavy() -> None:
    """autoload runs in every Python process of the image: no torch, triton or sglang."""
    code = (
        "import sys, engine.patches.kernels as k\n"
        "names = k.install({})\n"
        "heavy = [m for m in ('torch', 'triton', 'sglang') if m in sys.modules]\n"
        "assert names and not heavy, (names, heavy)\n"
    )
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, timeout=60)
