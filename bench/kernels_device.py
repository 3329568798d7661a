"""Fused decode kernels: launches and microseconds per op, fused vs reference.

`python -m bench kernels [--tokens 1] [--hidden 4096] [--wheel-root DIR]` on a CUDA machine
(any recent GPU runs these kernels; about a minute): for each op, launches counted while it
runs, the median time from `triton.testing.do_bench`, and the largest difference between
the two outputs. "Reference" is the torch code the model runs today (the references in
`engine.patches.kernels.reference`, op for op the wheel's for hc_pre, hc_post and the norm;
the wheel's own Triton kernels for the KDA glue when the unzipped wheel is given).

`report(out_dir)` is the CPU part `make bench` runs: launches per decode step before and
after, counted with Triton's interpreter on small inputs, scaled by the model's layer counts.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# GLM-5-Next config defaults (sglang-kt 0.7.2 `configs/glm5_next.py`).
LAYERS = 45
KDA_LAYERS = 34
MOE_LAYERS = 42  # first_k_dense_replace = 3
HC_MULT = 4
EXPERTS = 288
TOPK = 8
KDA_HEADS = 64  # linear_num_heads
KDA_HEAD_DIM = 128  # linear_head_dim
# Code-read, not countable on a CPU: the wheel's KDA decode runs three causal_conv1d_update
# launches and one bounded-gate decode launch; the gated RMSNorm after it is one more.
WHEEL_KDA_DECODE_LAUNCHES = 4
GATED_NORM_LAUNCHES = 1


@dataclass
class Row:
    op: str
    launches_before: int
    launches_after: int
    us_before: float | None = None
    us_after: float | None = None
    max_diff: float | None = None


def _launches(fn: Callable[[], object]) -> int:
    from engine.patches.kernels.counting import count_launches

    return sum(count_launches(fn).values())


def _mhc_inputs(tokens: int, hidden: int, device: str) -> dict[str, Any]:
    width = HC_MULT * hidden
    return {
        "x": torch.randn(tokens, width, device=device).bfloat16(),
        "hc_fn": torch.randn(24, width, device=device) / width**0.5,
        "hc_scale": 0.5 + torch.rand(3, device=device),
        "hc_base": 0.1 * torch.randn(24, device=device),
        "hc_mult": HC_MULT,
        "rms_eps": 1e-6,
        "hc_eps": 1e-6,
        "sinkhorn_iters": 20,
        "post_mult_value": 2.0,
    }


def _pairs(tokens: int, hidden: int, device: str) -> list[tuple[str, Any, Any]]:
    """(op, reference thunk, fused thunk) for the mHC ops and the gate."""
    from engine.patches.kernels import gate_topk, hc_post, hc_pre, reference

    args = _mhc_inputs(tokens, hidden, device)
    weight = (0.5 + torch.rand(hidden, device=device)).bfloat16()
    h = torch.randn(tokens, hidden, device=device).bfloat16()
    h_res = torch.rand(tokens, HC_MULT * HC_MULT, device=device)
    h_post = torch.rand(tokens, HC_MULT, device=device)
    logits = torch.randn(tokens, EXPERTS, device=device)
    bias = 0.05 * torch.randn(EXPERTS, device=device)

    def pre_ref() -> torch.Tensor:
        li = reference.hc_pre_reference(**args)[0]
        return reference.rms_norm_reference(li, weight, 1e-5)

    return [
        (
            "hc_pre + RMSNorm",
            pre_ref,
            lambda: hc_pre.hc_pre(**args, out_norm_weight=weight, out_norm_eps=1e-5)[0],
        ),
        (
            "hc_post",
            lambda: reference.hc_post_reference(h, args["x"], h_res, h_post, HC_MULT),
            lambda: hc_post.hc_post(h, args["x"], h_res, h_post, HC_MULT),
        ),
        (
            "gate top-k (288 experts)",
            lambda: reference.biased_topk_reference(logits, bias, TOPK, True, 2.5, False)[0],
            lambda: gate_topk.biased_topk(logits, bias, TOPK, True, 2.5, False)[0],
        ),
    ]


def _kda_pair(
    tokens: int, device: str, num_warps: int | None = None
) -> tuple[str, Any, Any] | None:
    """The KDA decode glue: the wheel's GPU chain (`WheelCode.kda_decode_chain`) vs the fused
    kernel (at `num_warps`, else its default), at GLM's 64 heads of 128. Needs the unzipped
    wheel under .cache/ (the CPU tests put it there); None without it."""
    from engine.patches.kernels.kda_decode import KdaDecodeInputs, kda_decode
    from tests.engine.kernels.wheel import WheelCode
    from tests.support.sglang_wheel import CACHE_DIR, SGLANG_KT_VERSION

    root = CACHE_DIR / f"sglang-kt-{SGLANG_KT_VERSION}"
    if not (root / ".unzipped").exists():
        return None
    wheel = WheelCode(root)
    heads, d, width = KDA_HEADS, KDA_HEAD_DIM, 4
    dim = heads * d
    slots = 2 * tokens + 1
    qkv = torch.randn(tokens, 3 * dim, device=device).bfloat16()
    states = [torch.randn(slots, width - 1, dim, device=device).bfloat16() for _ in range(3)]
    weights = [0.5 * torch.randn(dim, width, device=device) for _ in range(3)]
    gate = torch.randn(tokens, dim, device=device).bfloat16()
    beta = torch.randn(tokens, heads, device=device).bfloat16()
    a_log = 0.3 * torch.randn(heads, device=device)
    dt_bias = 0.1 * torch.randn(dim, device=device)
    ssm = 0.1 * torch.randn(slots, heads, d, d, device=device)
    idx = torch.randperm(slots - 1, device=device)[:tokens].to(torch.int32) + 1

    def inputs(conv_states: list[torch.Tensor], ssm_states: torch.Tensor) -> KdaDecodeInputs:
        # GLM's conv-state layout is [slots, W-1, dim]; the kernels take [slots, dim, W-1].
        q_state, k_state, v_state = (s.transpose(-1, -2) for s in conv_states)
        return KdaDecodeInputs(
            mixed_qkv=qkv,
            conv_states=(q_state, k_state, v_state),
            conv_weights=(weights[0], weights[1], weights[2]),
            conv_biases=(None, None, None),
            raw_gate=gate,
            raw_beta=beta,
            a_log=a_log,
            dt_bias=dt_bias,
            ssm_states=ssm_states,
            cache_indices=idx,
            lower_bound=-5.0,
            num_heads=heads,
            head_k_dim=d,
            head_v_dim=d,
        )

    # Each side updates its own copy of the states in place, as the engine does.
    fused_inputs = inputs(states, ssm)
    wheel_inputs = inputs([s.clone() for s in states], ssm.clone())
    return (
        "KDA decode glue (64 x 128 heads)",
        lambda: wheel.kda_decode_chain(wheel_inputs),
        (lambda: kda_decode(fused_inputs))
        if num_warps is None
        else (lambda: kda_decode(fused_inputs, num_warps=num_warps)),
    )


def _time_us(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench  # type: ignore[import-untyped]

    return float(do_bench(fn, warmup=25, rep=200)) * 1000.0


def _table(rows: list[Row]) -> str:
    def f(v: float | None, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    lines = [
        "| op | launches ref | launches fused | µs ref | µs fused | max abs diff |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.op} | {r.launches_before} | {r.launches_after} | {f(r.us_before, '.1f')} "
            f"| {f(r.us_after, '.1f')} | {f(r.max_diff, '.3g')} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench kernels")
    parser.add_argument("--tokens", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument(
        "--kda-sweep",
        action="store_true",
        help="only the KDA decode glue: wheel vs fused (4 and 8 warps) over batch sizes",
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("kernels: needs a CUDA GPU (the CPU part is `report`, run by `make bench`)")
        return 2
    torch.manual_seed(0)
    if args.kda_sweep:
        return _kda_sweep()
    rows = []
    pairs = _pairs(args.tokens, args.hidden, "cuda")
    kda = _kda_pair(args.tokens, "cuda")
    if kda is not None:
        pairs.append(kda)
    for op, ref, fused in pairs:
        want, got = ref(), fused()
        diff = float((got.float() - want.float()).abs().max())
        rows.append(Row(op, _launches(ref), _launches(fused), _time_us(ref), _time_us(fused), diff))
    print(f"tokens={args.tokens} hidden={args.hidden} device={torch.cuda.get_device_name()}")
    print(_table(rows))
    return 0


def _kda_sweep() -> int:
    """Where the one-program-per-head decode stops paying: the batch sizes to bound it by."""
    print(f"KDA decode glue, 64 x 128 heads, {torch.cuda.get_device_name()}")
    print("| batch | µs wheel | µs fused, 4 warps | µs fused, 8 warps |")
    print("|---|---|---|---|")
    for batch in (1, 2, 4, 8, 16, 32, 64, 128):
        times = []
        for warps in (4, 8):
            pair = _kda_pair(batch, "cuda", num_warps=warps)
            if pair is None:
                print("KDA sweep: needs the unzipped wheel under .cache/")
                return 2
            _, ref, fused = pair
            if warps == 4:
                times.append(_time_us(ref))
            times.append(_time_us(fused))
        print(f"| {batch} | " + " | ".join(f"{t:.1f}" for t in times) + " |")
    return 0


def _cpu_counts() -> dict[str, tuple[int, int]]:
    """Per-call launches (reference, fused) at 1 token, hidden 4096, on the interpreter."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from engine.patches.kernels import reference

    counts = {}
    for op, ref, fused in _pairs(1, 4096, "cpu"):
        counts[op] = (_launches(ref), _launches(fused))
    weight = torch.ones(4096).bfloat16()
    h = torch.randn(1, 4096).bfloat16()
    norm = _launches(lambda: reference.rms_norm_reference(h, weight, 1e-5))
    pre_ref, pre_fused = counts.pop("hc_pre + RMSNorm")
    counts["hc_pre"] = (pre_ref - norm, pre_fused)
    counts["RMSNorm after hc_pre"] = (norm, 0)
    # The gate's "before" is the wheel's own chain (unzipped wheel, decorators dropped).
    from tests.engine.kernels.wheel import WheelCode
    from tests.support.sglang_wheel import sglang_kt_root

    impl = WheelCode(sglang_kt_root()).function(
        "sglang.srt.layers.moe.topk", "biased_grouped_topk_impl"
    )
    logits, bias = torch.randn(1, EXPERTS), torch.randn(EXPERTS)
    gate = counts["gate top-k (288 experts)"]
    counts["gate top-k (288 experts)"] = (
        _launches(lambda: impl(h, logits, bias, TOPK, True, 1, 1, routed_scaling_factor=2.5)),
        gate[1],
    )
    counts["KDA decode glue"] = (
        WHEEL_KDA_DECODE_LAUNCHES + GATED_NORM_LAUNCHES,
        1 + GATED_NORM_LAUNCHES,
    )
    return counts


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = _cpu_counts()
    per_step = {
        "hc_pre": 2 * LAYERS,
        "RMSNorm after hc_pre": 2 * LAYERS,
        "hc_post": 2 * LAYERS,
        "gate top-k (288 experts)": MOE_LAYERS,
        "KDA decode glue": KDA_LAYERS,
    }
    lines = [
        "| op | per step | launches each, before | after | per step, before | after |",
        "|---|---|---|---|---|---|",
    ]
    total = [0, 0]
    for op, times in per_step.items():
        before, after = counts[op]
        total[0] += before * times
        total[1] += after * times
        lines.append(
            f"| {op} | {times} | {before} | {after} | {before * times} | {after * times} |"
        )
    lines.append(f"| **total** | | | | **{total[0]}** | **{total[1]}** |")
    body = "\n".join(lines)
    (out_dir / "launches.md").write_text(body + "\n")
    return (
        "## Fused decode kernels: launches per decode step (CPU count)\n\n"
        "Counted with Triton's interpreter and a torch dispatch counter at 1 token, hidden "
        "4096, scaled by GLM-5-Next's layer counts (45 layers, 42 MoE, 34 KDA). The gate's "
        "'before' is the eager chain; the wheel runs it under torch.compile, which fuses some "
        "of it. KDA 'before' is read from the wheel's code. Timings need a GPU: "
        "`python -m bench kernels` there.\n\n" + body
    )
