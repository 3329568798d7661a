"""KDA decode glue: one launch for the three short convolutions and the recurrent step."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.patches.kernels import seams
from engine.patches.kernels.kda_decode import KdaDecodeInputs, kda_decode, kda_decode_supported
from engine.patches.kernels.reference import conv_update_reference
from tests.engine.kernels.helpers import TOKENS
from tests.engine.kernels.wheel import WheelCode

KDA_OPS = "sglang.srt.layers.attention.linear.kernels.glm5_next_kda_ops"
WIDTH = 4
SLOTS = 10
LOWER_BOUND = -5.0


def _case(
    batch: int, heads: int, head_dim: int, act: torch.dtype = torch.bfloat16
) -> dict[str, Any]:
    dim = heads * head_dim
    return {
        "qkv": torch.randn(batch, 3 * dim).to(act),
        # GLM's layout: [slots, W-1, dim]
        "states": [torch.randn(SLOTS, WIDTH - 1, dim).to(act) for _ in range(3)],
        "weights": [0.5 * torch.randn(dim, WIDTH) for _ in range(3)],  # fp32, like GLM
        "gate": torch.randn(batch, dim).to(act),
        "beta": torch.randn(batch, heads).to(act),
        "a_log": 0.3 * torch.randn(heads),
        "dt_bias": 0.1 * torch.randn(dim),
        "ssm": 0.1 * torch.randn(SLOTS, heads, head_dim, head_dim),
        "idx": torch.randperm(SLOTS - 1)[:batch].to(torch.int32) + 1,
        "heads": heads,
        "head_dim": head_dim,
    }


def _inputs(case: dict[str, Any]) -> KdaDecodeInputs:
    return KdaDecodeInputs(
        mixed_qkv=case["qkv"],
        conv_states=tuple(s.transpose(-1, -2) for s in case["states"]),
        conv_weights=tuple(case["weights"]),
        conv_biases=(None, None, None),
        raw_gate=case["gate"],
        raw_beta=case["beta"],
        a_log=case["a_log"],
        dt_bias=case["dt_bias"],
        ssm_states=case["ssm"],
        cache_indices=case["idx"],
        lower_bound=LOWER_BOUND,
        num_heads=case["heads"],
        head_k_dim=case["head_dim"],
        head_v_dim=case["head_dim"],
    )


def _clone(case: dict[str, Any]) -> dict[str, Any]:
    out = dict(case)
    out["states"] = [s.clone() for s in case["states"]]
    out["ssm"] = case["ssm"].clone()
    return out


def _reference(wheel: WheelCode, case: dict[str, Any]) -> torch.Tensor:
    """Three one-token convs (our reference of the wheel's Triton conv), then the wheel's
    own CPU decode (`_torch_safe_decode`)."""
    heads, d = case["heads"], case["head_dim"]
    batch = case["qkv"].shape[0]
    dim = heads * d
    conv = [
        conv_update_reference(
            case["qkv"][:, i * dim : (i + 1) * dim],
            case["states"][i].transpose(-1, -2),
            case["weights"][i],
            None,
            case["idx"],
        ).reshape(1, batch, heads, d)
        for i in range(3)
    ]
    out: torch.Tensor = wheel.module(KDA_OPS)._torch_safe_decode(
        A_log=case["a_log"],
        raw_gate=case["gate"].reshape(1, batch, heads, d),
        dt_bias=case["dt_bias"],
        lower_bound=LOWER_BOUND,
        q=conv[0],
        k=conv[1],
        v=conv[2],
        raw_beta=case["beta"].reshape(1, batch, heads),
        state_source=case["ssm"],
        state_indices=case["idx"],
        query_start_loc=torch.arange(batch + 1, dtype=torch.int32),
        scale=d**-0.5,
        use_qk_l2norm_in_kernel=True,
    )
    return out


@pytest.mark.parametrize("head_dim", [64, 96])
@pytest.mark.parametrize("batch", TOKENS)
def test_matches_the_wheels_cpu_decode(wheel: WheelCode, batch: int, head_dim: int) -> None:
    case = _case(batch, 2, head_dim)
    ref_case = _clone(case)
    out = kda_decode(_inputs(case))
    want = _reference(wheel, ref_case)
    assert out.shape == (1, batch, 2, head_dim)
    assert out.dtype == torch.bfloat16
    # Outputs: fp32 reductions in another order, then one bf16 rounding.
    torch.testing.assert_close(out.float(), want.float(), rtol=2**-7, atol=1e-5)
    torch.testing.assert_close(case["ssm"], ref_case["ssm"], rtol=1e-5, atol=1e-6)
    for got_state, want_state in zip(case["states"], ref_case["states"], strict=True):
        assert torch.equal(got_state, want_state)


def test_matches_the_wheels_triton_decode_in_fp32(wheel: WheelCode) -> None:
    """The wheel's own decode kernel runs in the interpreter when nothing is bf16."""
    ops = wheel.module(KDA_OPS)
    batch, heads, d = 3, 2, 32
    case = _case(batch, heads, d, act=torch.float32)
    ref_case = _clone(case)
    out = kda_decode(_inputs(case))
    dim = heads * d
    qkv = [
        conv_update_reference(
            ref_case["qkv"][:, i * dim : (i + 1) * dim],
            ref_case["states"][i].transpose(-1, -2),
            ref_case["weights"][i],
            None,
            ref_case["idx"],
        ).reshape(1, batch, heads, d)
        for i in range(3)
    ]
    want = torch.empty(1, 1, batch, heads, d)
    ops._glm5_next_safe_decode_kernel[(1, 1, batch * heads)](
        A_log=ref_case["a_log"],
        raw_gate=ref_case["gate"].reshape(1, batch, heads, d),
        dt_bias=ref_case["dt_bias"],
        lower_bound=LOWER_BOUND,
        q=qkv[0],
        k=qkv[1],
        v=qkv[2],
        raw_beta=ref_case["beta"].reshape(1, batch, heads),
        output=want,
        state_source=ref_case["ssm"],
        state_indices=ref_case["idx"],
        query_start_loc=torch.arange(batch + 1, dtype=torch.int32),
        scale=d**-0.5,
        T=batch,
        B=1,
        H=heads,
        HV=heads,
        K=d,
        V=d,
        BK=d,
        BV=d,
        USE_INITIAL_STATE=True,
        USE_QK_L2NORM_IN_KERNEL=True,
        IS_VARLEN=True,
        SPLIT_N_HV_GRID=False,
    )
    torch.testing.assert_close(out, want.squeeze(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(case["ssm"], ref_case["ssm"], rtol=1e-5, atol=1e-6)


def test_conv_reference_is_a_causal_conv() -> None:
    """The conv reference against a plain windowed sum (fp32, so no rounding question)."""
    x = torch.randn(3, 40)
    states = torch.randn(5, WIDTH - 1, 40)
    weight = torch.randn(40, WIDTH)
    idx = torch.tensor([4, 0, 2], dtype=torch.int32)
    window = torch.cat([states[idx.long()], x.unsqueeze(1)], dim=1)  # [B, W, D]
    want = torch.nn.functional.silu((window * weight.t().unsqueeze(0)).sum(1))
    before = states.clone()
    got = conv_update_reference(x, states.transpose(-1, -2), weight, None, idx)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert torch.equal(states[idx.long()], window[:, 1:])
    assert torch.equal(states[[1, 3]], before[[1, 3]])


def test_padding_rows_touch_nothing() -> None:
    case = _case(3, 2, 32)
    case["idx"] = torch.tensor([2, -1, 5], dtype=torch.int32)
    states = [s.clone() for s in case["states"]]
    ssm = case["ssm"].clone()
    out = kda_decode(_inputs(case))
    assert torch.equal(out[0, 1], torch.zeros_like(out[0, 1]))
    untouched = [i for i in range(SLOTS) if i not in (2, 5)]
    assert torch.equal(case["ssm"][untouched], ssm[untouched])
    for got, before in zip(case["states"], states, strict=True):
        assert torch.equal(got[untouched], before[untouched])


def test_backend_seam_gathers_the_layer_and_falls_back_on_cpu() -> None:
    case = _case(2, 2, 32)
    layer = SimpleNamespace(
        layer_id=7,
        conv_weights=tuple(case["weights"]),
        bias=(None, None, None),
        A_log=case["a_log"],
        dt_bias=case["dt_bias"],
        num_q_heads=2,
        num_k_heads=2,
        num_v_heads=2,
        head_q_dim=32,
        head_k_dim=32,
        head_v_dim=32,
    )
    cache = SimpleNamespace(conv=case["states"], temporal=case["ssm"])
    backend = SimpleNamespace(
        req_to_token_pool=SimpleNamespace(mamba2_layer_cache=lambda layer_id: cache),
        forward_metadata=SimpleNamespace(mamba_cache_indices=case["idx"]),
        _lower_bound=lambda layer: LOWER_BOUND,
    )
    inputs = seams.kda_inputs(backend, layer, case["qkv"], case["gate"], case["beta"])
    assert kda_decode_supported(inputs)
    assert inputs.conv_states[0].shape == (SLOTS, 64, WIDTH - 1)

    calls: list[int] = []

    def original(self: Any, layer: Any, mixed_qkv: Any, a: Any, b: Any, **kw: Any) -> Any:
        calls.append(layer.layer_id)
        return "wheel"

    fused = seams.make_forward_decode(original)
    assert fused(backend, layer, case["qkv"], case["gate"], case["beta"]) == "wheel"
    assert calls == [7]
    assert getattr(fused, seams.MARKER) == "kda_decode"
    assert fused.__wrapped__ is original  # type: ignore[attr-defined]
