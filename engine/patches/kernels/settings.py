"""The kernel patches' switches, read from the environment (the launcher sets them).

Every kernel is on unless switched off; `FLASHBOX_KERNELS=0` turns them all off. The indexer
query chunk stays at the wheel's 32 unless `FLASHBOX_INDEXER_QUERY_CHUNK` is set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from engine.patches.guard import switch_on

log = logging.getLogger("flashbox.engine.patches.kernels")

# Attribute set on every installed replacement (idempotent installs, finding the original).
MARKER = "__flashbox_kernel__"

ENV_ALL = "FLASHBOX_KERNELS"
ENV_HC_PRE = "FLASHBOX_KERNEL_HC_PRE"
ENV_HC_PRE_NORM = "FLASHBOX_KERNEL_HC_PRE_NORM"
ENV_HC_PRE_MAX_TOKENS = "FLASHBOX_KERNEL_HC_PRE_MAX_TOKENS"
ENV_HC_POST = "FLASHBOX_KERNEL_HC_POST"
ENV_GATE_TOPK = "FLASHBOX_KERNEL_GATE_TOPK"
ENV_KDA_DECODE = "FLASHBOX_KERNEL_KDA_DECODE"
ENV_INDEXER_QUERY_CHUNK = "FLASHBOX_INDEXER_QUERY_CHUNK"

# Above this many tokens (prefill) hc_pre stays with the wheel: the per-token GEMV kernel
# re-reads the mix matrix per token, which a batched GEMM does not.
DEFAULT_HC_PRE_MAX_TOKENS = 64
MAX_HC_PRE_MAX_TOKENS = 4096
# The wheel's eager indexer scorer tile is chunk x 2048 keys x 32 heads: bf16 scores plus an
# fp32 temporary, ~384 KiB per query row. 1024 rows is ~384 MiB of scratch.
WHEEL_INDEXER_QUERY_CHUNK = 32
MAX_INDEXER_QUERY_CHUNK = 1024


@dataclass(frozen=True)
class KernelSettings:
    hc_pre: bool = True
    hc_pre_norm: bool = True
    hc_pre_max_tokens: int = DEFAULT_HC_PRE_MAX_TOKENS
    hc_post: bool = True
    gate_topk: bool = True
    kda_decode: bool = True
    indexer_query_chunk: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KernelSettings:
        env = os.environ if environ is None else environ
        on = switch_on(ENV_ALL, default=True, environ=env)

        def kernel(name: str) -> bool:
            return on and switch_on(name, default=True, environ=env)

        return cls(
            hc_pre=kernel(ENV_HC_PRE),
            hc_pre_norm=kernel(ENV_HC_PRE_NORM),
            hc_pre_max_tokens=_bounded_int(
                env, ENV_HC_PRE_MAX_TOKENS, DEFAULT_HC_PRE_MAX_TOKENS, MAX_HC_PRE_MAX_TOKENS
            )
            or DEFAULT_HC_PRE_MAX_TOKENS,
            hc_post=kernel(ENV_HC_POST),
            gate_topk=kernel(ENV_GATE_TOPK),
            kda_decode=kernel(ENV_KDA_DECODE),
            indexer_query_chunk=_bounded_int(
                env, ENV_INDEXER_QUERY_CHUNK, None, MAX_INDEXER_QUERY_CHUNK
            ),
        )


def _bounded_int(env: Mapping[str, str], name: str, default: int | None, upper: int) -> int | None:
    """A positive int up to `upper`; anything else logs why and keeps the default."""
    raw = env.get(name, "").strip()
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= upper:
        log.warning("%s=%r ignored: expected an integer in 1..%d", name, raw, upper)
        return default
    return value
