"""On a CUDA device: fused vs eager, CUDA-graph capture and replay, do_bench runs.

Skipped without CUDA. No timing assertions: do_bench must only return a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from engine.patches.kernels import gate_topk, hc_post, hc_pre, kda_decode, reference
from tests.engine.kernels.helpers import max_rel
from tests.engine.kernels.test_hc_pre import _check_layer_input

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
CUDA = "cuda"


def _mhc(tokens: int, hidden: int) -> dict[str, Any]:
    width = 4 * hidden
    return {
        "x": torch.randn(tokens, width, device=CUDA).bfloat16(),
        "hc_fn": torch.randn(24, width, device=CUDA) / width**0.5,
        "hc_scale": 0.5 + torch.rand(3, device=CUDA),
        "hc_base": 0.1 * torch.randn(24, device=CUDA),
        "hc_mult": 4,
        "rms_eps": 1e-6,
        "hc_eps": 1e-6,
        "sinkhorn_iters": 20,
        "post_mult_value": 2.0,
    }


@pytest.mark.parametrize("tokens", [1, 8])
def test_fused_vs_eager_on_device(tokens: int) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    args = _mhc(tokens, 4096)
    got = hc_pre.hc_pre(**args)
    want = reference.hc_pre_reference(**args)
    assert max_rel(got[1], want[1]) <= 2e-5
    assert max_rel(got[2], want[2]) <= 2e-5
    _check_layer_input(args, got[0], want[0])
    h = torch.randn(tokens, 4096, device=CUDA).bfloat16()
    assert torch.equal(
        hc_post.hc_post(h, args["x"], got[1], got[2], 4),
        reference.hc_post_reference(h, args["x"], got[1], got[2], 4),
    )
    logits = torch.randn(tokens, 288, device=CUDA)
    bias = 0.05 * torch.randn(288, device=CUDA)
    w, ids = gate_topk.biased_topk(logits, bias, 8, True, 2.5, True)
    rw, rids = reference.biased_topk_reference(logits, bias, 8, True, 2.5, True)
    assert torch.equal(ids.sort(-1).values, rids.sort(-1).values)
    torch.testing.assert_close(w.sort(-1).values, rw.sort(-1).values, rtol=1e-5, atol=0)


def _graph_replays(fn: Callable[[], torch.Tensor]) -> None:
    eager = fn().clone()
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm up (compiles) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_cuda_graph_capture_and_replay() -> None:
    args = _mhc(2, 4096)
    weight = torch.ones(4096, device=CUDA).bfloat16()
    _graph_replays(lambda: hc_pre.hc_pre(**args, out_norm_weight=weight, out_norm_eps=1e-5)[0])
    h = torch.randn(2, 4096, device=CUDA).bfloat16()
    h_res, h_post = torch.rand(2, 16, device=CUDA), torch.rand(2, 4, device=CUDA)
    _graph_replays(lambda: hc_post.hc_post(h, args["x"], h_res, h_post, 4))
    logits, bias = torch.randn(2, 288, device=CUDA), torch.randn(288, device=CUDA)
    _graph_replays(lambda: gate_topk.biased_topk(logits, bias, 8, True)[0])


def test_kda_decode_graph_and_state_update() -> None:
    heads, d, slots, batch = 4, 128, 6, 2
    dim = heads * d

    def fresh() -> kda_decode.KdaDecodeInputs:
        g = torch.Generator(device=CUDA).manual_seed(0)

        def r(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, device=CUDA, generator=g)

        return kda_decode.KdaDecodeInputs(
            mixed_qkv=r(batch, 3 * dim).bfloat16(),
            conv_states=tuple(r(slots, 3, dim).bfloat16().transpose(-1, -2) for _ in range(3)),  # type: ignore[arg-type]
            conv_weights=tuple(r(dim, 4) for _ in range(3)),  # type: ignore[arg-type]
            conv_biases=(None, None, None),
            raw_gate=r(batch, dim).bfloat16(),
            raw_beta=r(batch, heads).bfloat16(),
            a_log=0.3 * r(heads),
            dt_bias=0.1 * r(dim),
            ssm_states=0.1 * r(slots, heads, d, d),
            cache_indices=torch.tensor([3, 1], dtype=torch.int32, device=CUDA),
            lower_bound=-5.0,
            num_heads=heads,
            head_k_dim=d,
            head_v_dim=d,
        )

    a, b = fresh(), fresh()
    eager = kda_decode.kda_decode(a)
    graph = torch.cuda.CUDAGraph()
    kda_decode.kda_decode(fresh())  # compile outside the capture
    with torch.cuda.graph(graph):
        out = kda_decode.kda_decode(b)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    assert torch.equal(a.ssm_states, b.ssm_states)


def test_do_bench_runs() -> None:
    from triton.testing import do_bench  # type: ignore[import-untyped]

    args = _mhc(1, 4096)
    ms = do_bench(lambda: hc_pre.hc_pre(**args), warmup=5, rep=20)
    assert ms > 0


def test_kda_decode_matches_the_wheels_gpu_chain(wheel: Any) -> None:
    """Fused decode vs what the wheel runs on a GPU today: three Triton conv updates, then
    its bounded-gate decode kernel, all compiled for the device, bf16, GLM's head size."""
    from tests.engine.kernels.test_kda_decode import _case, _clone, _inputs

    heads, d, batch = 4, 128, 8
    case = {
        k: [t.to(CUDA) for t in v] if isinstance(v, list) else v.to(CUDA)
        for k, v in _case(batch, heads, d).items()
        if not isinstance(v, int)
    }
    case.update(heads=heads, head_dim=d)
    ref = _clone(case)
    want = wheel.kda_decode_chain(_inputs(ref))
    got = kda_decode.kda_decode(_inputs(case))
    torch.cuda.synchronize()
    assert got.shape == want.reshape(1, batch, heads, d).shape
    # Both reduce in fp32 in their own order, then round once to bf16.
    torch.testing.assert_close(got.float(), want.reshape(got.shape).float(), rtol=2**-7, atol=1e-5)
    torch.testing.assert_close(case["ssm"], ref["ssm"], rtol=1e-4, atol=1e-5)
    for got_state, want_state in zip(case["states"], ref["states"], strict=True):
        assert torch.equal(got_state, want_state)
