"""Wire the fused kernels into sglang-kt 0.7.2 (ENGINE.md section B).

`install()` is called once at interpreter start in every engine process. For each kernel
that is switched on it waits for sglang to import the module holding the seam, checks that
the wheel files the kernel was written against have the pinned sha256s, and only then swaps
in the replacement. The seams are read at call time by the wheel (`hc_pre` is imported inside
its callers; `_glm5_next_hc_post` and `biased_grouped_topk` are module globals;
`forward_decode` is a method), so replacing the attribute is enough.

Nothing heavy is imported here (this runs in every Python process of the engine image):
torch, triton and the kernels are imported when the first seam is patched.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from engine.patches.guard import sources_match
from engine.patches.kernels.post_import import PostImportFinder, when_imported
from engine.patches.kernels.settings import MARKER, WHEEL_INDEXER_QUERY_CHUNK, KernelSettings

log = logging.getLogger("flashbox.engine.patches.kernels")

MHC = "sglang.kernels.ops.layernorm.mhc"
GLM5_NEXT = "sglang.srt.models.glm5_next"
GLM5_NEXT_NORM = "sglang.srt.models.glm5_next_norm"
COMMUNICATOR_MHC = "sglang.srt.layers.communicator_mhc"
TOPK = "sglang.srt.layers.moe.topk"
KDA_BACKEND = "sglang.srt.layers.attention.linear.glm5_next_kda_backend"
KDA_OPS = "sglang.srt.layers.attention.linear.kernels.glm5_next_kda_ops"
CONV_TRITON = "sglang.srt.layers.attention.mamba.causal_conv1d_triton"
INDEXER_LOGITS = "sglang.srt.layers.attention.nsa.glm5_next_indexer_logits"
INDEXER_KPOOL = "sglang.srt.layers.attention.nsa.nsa_indexer_kpool"

# sha256 of each sglang-kt 0.7.2 file whose arithmetic or calling contract a kernel copies.
WHEEL_SHA256 = {
    MHC: "7efd6554716f1b6a5a94ac4421dc8a83b98c10a93ee84a40606aa2864a85ea76",
    GLM5_NEXT: "f7a7426a012ef51259d1cf2fdb18d30a9c6680744ed43738d5485281c32fbdba",
    GLM5_NEXT_NORM: "58f0f5e8fb8e888dbf096d58b46ffd71390c5d99cfcd3edb71549df2747e972f",
    COMMUNICATOR_MHC: "31c4a65860252a744028acc39fe7c2678c8bf7db5d8930e695af0649863cf8a6",
    TOPK: "deb759eaed876141da95bb73ac556361535c87ad23568a5bd8fc1c9e2bea2cc7",
    KDA_BACKEND: "af09639b7f367a766a43ceb6a9489cb39c1b727b9988a3c44cac77dae65d2c79",
    KDA_OPS: "f87a2858d60cedbad5ece482e02e12120d6ce212888776bc08e79817ca11689d",
    CONV_TRITON: "1700fae290fb1c28d6968f1f2732067aeba26e92898653f3ec6fcbed3c24e5cb",
    INDEXER_LOGITS: "72c72c336e4a236b07d3fbcd56eaa4364ab43795c04559fa9bd085e7e0d32e58",
    INDEXER_KPOOL: "c35c475f86475d8db6dadec9bbe0cc5faf1b05fc9d83dc739aca4128d43bba6f",
}


@dataclass(frozen=True)
class Seam:
    """One patch: the module and attribute it replaces and the files it depends on."""

    name: str
    module: str
    attribute: str  # "Class.method" for methods
    depends_on: tuple[str, ...]
    replace: Callable[[Any], Any]  # original -> replacement (imports the kernels when called)


def _factory(name: str, *extra: Any) -> Callable[[Any], Any]:
    def build(original: Any) -> Any:
        from engine.patches.kernels import seams

        return getattr(seams, name)(original, *extra)

    return build


def seams_for(settings: KernelSettings) -> list[Seam]:
    """The seams switched on by `settings`, in install order."""
    out: list[Seam] = []
    if settings.hc_pre:
        out.append(
            Seam(
                "hc_pre",
                MHC,
                "hc_pre",
                (MHC, COMMUNICATOR_MHC, GLM5_NEXT_NORM),
                _factory("make_hc_pre", settings),
            )
        )
    if settings.hc_post:
        out.append(
            Seam("hc_post", GLM5_NEXT, "_glm5_next_hc_post", (GLM5_NEXT,), _factory("make_hc_post"))
        )
    if settings.gate_topk:
        out.append(
            Seam(
                "gate_topk",
                TOPK,
                "biased_grouped_topk",
                (TOPK,),
                _factory("make_biased_grouped_topk"),
            )
        )
    if settings.kda_decode:
        out.append(
            Seam(
                "kda_decode",
                KDA_BACKEND,
                "Glm5NextKDAAttnBackend.forward_decode",
                (KDA_BACKEND, KDA_OPS, CONV_TRITON),
                _factory("make_forward_decode"),
            )
        )
    chunk = settings.indexer_query_chunk
    if chunk is not None and chunk != WHEEL_INDEXER_QUERY_CHUNK:
        out.append(
            Seam(
                "indexer_query_chunk",
                INDEXER_LOGITS,
                "iter_glm5_next_eager_fp8_mqa_logits",
                (INDEXER_LOGITS, INDEXER_KPOOL),
                _factory("make_indexer_iter", chunk),
            )
        )
    return out


def _apply(seam: Seam, module: ModuleType, expected: Mapping[str, str]) -> bool:
    owner_name, _, attr = seam.attribute.rpartition(".")
    owner: Any = getattr(module, owner_name) if owner_name else module
    current = getattr(owner, attr)
    if getattr(current, MARKER, None) == seam.name:
        return True
    if not sources_match({m: expected[m] for m in seam.depends_on}, patch=f"kernel {seam.name}"):
        return False
    setattr(owner, attr, seam.replace(current))
    log.info("kernel %s: installed at %s.%s", seam.name, seam.module, seam.attribute)
    return True


def install(
    environ: Mapping[str, str] | None = None,
    *,
    expected: Mapping[str, str] | None = None,
) -> list[str]:
    """Arrange for every switched-on kernel to be installed; returns their names.

    A kernel whose module is already imported is installed (or refused) now; the others
    when sglang imports their module. `expected` overrides the pinned sha256s (tests only).
    """
    settings = KernelSettings.from_env(environ)
    pinned = WHEEL_SHA256 if expected is None else expected
    finder = next((f for f in sys.meta_path if isinstance(f, PostImportFinder)), None)
    finder = finder or PostImportFinder()
    chosen = seams_for(settings)
    for seam in chosen:

        def on_import(module: ModuleType, seam: Seam = seam) -> None:
            _apply(seam, module, pinned)

        when_imported(seam.module, on_import, finder)
    return [seam.name for seam in chosen]


def uninstall_all() -> None:
    """Put the wheel's originals back wherever a kernel is installed (tests, A/B runs)."""
    for seam in seams_for(KernelSettings(indexer_query_chunk=WHEEL_INDEXER_QUERY_CHUNK + 1)):
        module = sys.modules.get(seam.module)
        if module is None:
            continue
        owner_name, _, attr = seam.attribute.rpartition(".")
        owner: Any = getattr(module, owner_name) if owner_name else module
        current = getattr(owner, attr)
        if getattr(current, MARKER, None) is not None:
            setattr(owner, attr, current.__wrapped__)
