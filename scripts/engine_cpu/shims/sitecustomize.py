"""Test-only start-up hook for the real engine on a CPU (never copied into an image).

Stands in for: a CUDA device at import time. sglang-kt calls
`torch.cuda.get_device_capability()` while its modules import (its FP8 quantization module
reads the GPU generation at module level), which raises on a host without CUDA. The CPU path
never uses the answer; (0, 0) says "no GPU generation" and keeps every GPU-only branch off.

Also, on such a host: registers the pure-torch stand-ins for the sgl_kernel CPU ops the tiny
hybrid model calls (sgl_kernel_cpu_ops) and installs the post-import patches that let its
recurrent-state prefix cache run on a CPU (hybrid_patches). A failure there is printed to
stderr and never stops the interpreter.
"""

from __future__ import annotations


def _no_cuda_capability(device: object = None) -> tuple[int, int]:
    return (0, 0)


def _install() -> None:
    try:
        import torch
    except ImportError:
        return
    if not torch.cuda.is_available():
        torch.cuda.get_device_capability = _no_cuda_capability
        _install_cpu_hybrid()


def _install_cpu_hybrid() -> None:
    import importlib
    import sys

    try:
        # Registers torch.ops.sgl_kernel.*_cpu (by name: this folder is not a package).
        importlib.import_module("sgl_kernel_cpu_ops")
    except Exception as exc:
        print(f"flashbox sitecustomize: sgl_kernel_cpu_ops not loaded: {exc!r}", file=sys.stderr)
    try:
        importlib.import_module("hybrid_patches").install()
    except Exception as exc:
        print(f"flashbox sitecustomize: hybrid_patches not installed: {exc!r}", file=sys.stderr)


_install()
