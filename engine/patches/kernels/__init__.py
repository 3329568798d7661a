"""Fused Triton decode kernels for the GLM-5-Next family on sglang-kt 0.7.2.

`install()` wires them in when sglang imports each seam (see docs/kernels.md). Importing
this package imports neither sglang nor torch.
"""

from engine.patches.kernels.wiring import install

__all__ = ["install"]
