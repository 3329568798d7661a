"""Round-to-nearest-even to bf16, done by hand so it is right everywhere.

The model rounds to bf16 at fixed points. A Triton `.to(tl.bfloat16)` rounds to nearest
even on a GPU but truncates in the CPU interpreter, and bf16 arithmetic in the interpreter
is wrong, so every kernel computes in fp32 and calls `rne_bf16` where the model rounds.
The value it returns is exactly representable in bf16: the final store's cast is then exact
on either backend.
"""

from __future__ import annotations

import torch
import triton  # type: ignore[import-untyped]
import triton.language as tl  # type: ignore[import-untyped]


@triton.jit
def rne_bf16(x):  # type: ignore[no-untyped-def]
    """fp32 in, fp32 out: the nearest bf16 value, ties to even (NaN passes through)."""
    bits = x.to(tl.uint32, bitcast=True)
    lsb = (bits >> 16) & 1
    rounded = (bits + 0x7FFF + lsb) & 0xFFFF0000
    return tl.where(x != x, x, rounded.to(tl.float32, bitcast=True))


def rne_bf16_torch(x: torch.Tensor) -> torch.Tensor:
    """Torch twin of `rne_bf16` for the references: fp32 -> bf16-valued fp32."""
    return x.float().to(torch.bfloat16).float()
