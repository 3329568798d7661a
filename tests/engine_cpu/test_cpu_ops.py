"""The pure-torch stand-ins for sgl_kernel's CPU ops against naive step-by-step references
(scripts/engine_cpu/shims/sgl_kernel_cpu_ops.py).

Runs wherever torch imports: the engine virtualenv (torch 2.9) or the test virtualenv (CPU
torch); skipped where it does not.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

SHIMS = Path(__file__).resolve().parents[2] / "scripts" / "engine_cpu" / "shims"
if str(SHIMS) not in sys.path:
    sys.path.insert(0, str(SHIMS))

# By name: the shims folder is not a package (the engine finds it on PYTHONPATH).
ops: Any = importlib.import_module("sgl_kernel_cpu_ops")
ops.register()
K_OPS = torch.ops.sgl_kernel

HV, H, KD, VD = 4, 2, 16, 16  # the tiny hybrid's value heads, key heads, head dims


def _gen(seed: int) -> Any:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _inputs(total: int, seed: int = 0) -> dict[str, Any]:
    g = _gen(seed)
    return {
        "q": torch.randn(1, total, H, KD, generator=g),
        "k": torch.randn(1, total, H, KD, generator=g),
        "v": torch.randn(1, total, HV, VD, generator=g),
        "a": torch.randn(total, HV, generator=g),
        "b": torch.randn(total, HV, generator=g),
        "A_log": torch.randn(HV, generator=g) * 0.5,
        "dt_bias": torch.randn(HV, generator=g),
    }


# --- naive references ---------------------------------------------------------------------


def _ref_delta_rule(
    q: Any, k: Any, v: Any, g: Any, beta: Any, state: Any, scale: float
) -> tuple[Any, Any]:
    """Token by token, head by head, with Python loops over heads: the textbook recurrence.
    q, k [T, HV, K] (normalised); v [T, HV, V]; g, beta [T, HV]; state [HV, K, V]."""
    state = state.clone().double()
    out = torch.zeros(q.shape[0], v.shape[1], v.shape[2], dtype=torch.float64)
    for t in range(q.shape[0]):
        for h in range(v.shape[1]):
            s = state[h] * torch.exp(g[t, h].double())
            kt, qt, vt = k[t, h].double(), q[t, h].double(), v[t, h].double()
            u = beta[t, h].double() * (vt - s.T @ kt)
            s = s + torch.outer(kt, u)
            out[t, h] = s.T @ (qt * scale)
            state[h] = s
    return out, state


def _ref_conv(x_seq: Any, weight: Any, bias: Any, prev: Any, silu: bool) -> tuple[Any, Any]:
    """x_seq [dim, L], prev [dim, W-1]: out[:, t] = sum_j w[:, j] * full[:, t + j]."""
    width = weight.shape[1]
    full = torch.cat([prev, x_seq], dim=1).double()
    out = torch.zeros(x_seq.shape, dtype=torch.float64)
    for t in range(x_seq.shape[1]):
        acc = (full[:, t : t + width] * weight.double()).sum(-1)
        if bias is not None:
            acc = acc + bias.double()
        out[:, t] = torch.nn.functional.silu(acc) if silu else acc
    return out, full[:, -(width - 1) :]


# --- gating -----------------------------------------------------------------------------------


def test_gdn_gating_matches_formula() -> None:
    x = _inputs(7)
    g, beta = K_OPS.fused_gdn_gating_cpu(x["A_log"], x["a"], x["b"], x["dt_bias"])
    assert g.shape == beta.shape == (1, 7, HV)
    assert g.dtype == beta.dtype == torch.float32
    want_g = -torch.exp(x["A_log"]) * torch.nn.functional.softplus(x["a"] + x["dt_bias"])
    torch.testing.assert_close(g[0], want_g)
    torch.testing.assert_close(beta[0], torch.sigmoid(x["b"]))


def test_gdn_gating_softplus_threshold_is_linear_above_it() -> None:
    a = torch.full((1, HV), 30.0)
    g, _ = K_OPS.fused_gdn_gating_cpu(torch.zeros(HV), a, torch.zeros(1, HV), torch.zeros(HV))
    torch.testing.assert_close(g[0], torch.full((1, HV), -30.0))


# --- gated delta rule ---------------------------------------------------------------------


@pytest.mark.parametrize("lengths", [[1], [63], [64], [65], [150], [64, 1, 130, 200]])
def test_chunked_equals_token_by_token(lengths: list[int]) -> None:
    total = sum(lengths)
    x = _inputs(total, seed=len(lengths) + total)
    g, beta = ops.gdn_gating(x["A_log"], x["a"], x["b"], x["dt_bias"])
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    init = torch.randn(len(lengths), HV, KD, VD, generator=_gen(1)) * 0.3
    o, final = K_OPS.chunk_gated_delta_rule_cpu(
        x["q"], x["k"], x["v"], g[None], beta[None], init, True, cu, False, True
    )
    assert o.shape == (1, total, HV, VD)
    assert final.shape == (len(lengths), HV, KD, VD)
    qn = ops._l2norm(x["q"][0].repeat_interleave(HV // H, 1))
    kn = ops._l2norm(x["k"][0].repeat_interleave(HV // H, 1))
    for i in range(len(lengths)):
        s, e = int(cu[i]), int(cu[i + 1])
        want_o, want_s = _ref_delta_rule(
            qn[s:e], kn[s:e], x["v"][0, s:e], g[s:e], beta[s:e], init[i], KD**-0.5
        )
        torch.testing.assert_close(o[0, s:e].double(), want_o, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(final[i].double(), want_s, atol=2e-5, rtol=1e-4)


def test_chunk_states_are_the_states_before_each_chunk() -> None:
    lengths = [130, 64, 10]
    total = sum(lengths)
    x = _inputs(total, seed=3)
    g, beta = ops.gdn_gating(x["A_log"], x["a"], x["b"], x["dt_bias"])
    cu = torch.tensor([0, 130, 194, 204])
    init = torch.randn(3, HV, KD, VD, generator=_gen(2)) * 0.3
    _, _, h = ops.chunk_gated_delta_rule(
        x["q"], x["k"], x["v"], g[None], beta[None], init, cu, True
    )
    # ceil(130/64) + ceil(64/64) + ceil(10/64) = 3 + 1 + 1 checkpoints, packed in order.
    assert h.shape == (1, 5, HV, KD, VD)
    qn = ops._l2norm(x["q"][0].repeat_interleave(HV // H, 1))
    kn = ops._l2norm(x["k"][0].repeat_interleave(HV // H, 1))
    expected = []
    for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)):
        for c0 in range(s, e, ops.CHUNK_SIZE):
            _, st = _ref_delta_rule(
                qn[s:c0], kn[s:c0], x["v"][0, s:c0], g[s:c0], beta[s:c0], init[i], KD**-0.5
            )
            expected.append(st)
    for j, want in enumerate(expected):
        torch.testing.assert_close(h[0, j].double(), want, atol=2e-5, rtol=1e-4)


def test_resuming_from_a_chunk_state_gives_the_same_continuation() -> None:
    """What the prefix cache relies on: the state at a chunk point, fed back as the initial
    state of the rest, reproduces the uncached outputs and final state."""
    total = 200
    x = _inputs(total, seed=11)
    g, beta = ops.gdn_gating(x["A_log"], x["a"], x["b"], x["dt_bias"])
    args = (x["q"], x["k"], x["v"], g[None], beta[None])
    o_full, f_full, h = ops.chunk_gated_delta_rule(*args, None, torch.tensor([0, total]), True)
    cut = 128  # the third chunk's start
    rest = [t[:, cut:] for t in args]
    o_rest, f_rest, _ = ops.chunk_gated_delta_rule(
        *rest, h[0, 2][None], torch.tensor([0, total - cut]), True
    )
    torch.testing.assert_close(o_rest, o_full[:, cut:], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(f_rest, f_full, atol=1e-6, rtol=1e-5)


def test_recurrent_update_matches_reference_and_updates_slots_in_place() -> None:
    lengths = [1, 1, 3]
    total = sum(lengths)
    x = _inputs(total, seed=5)
    pool = torch.randn(6, HV, KD, VD, generator=_gen(4)) * 0.3
    before = pool.clone()
    slots = torch.tensor([4, 1, 2])
    cu = torch.tensor([0, 1, 2, 5])
    o = K_OPS.fused_sigmoid_gating_delta_rule_update_cpu(
        A_log=x["A_log"],
        dt_bias=x["dt_bias"],
        q=x["q"],
        k=x["k"],
        v=x["v"],
        a=x["a"],
        b=x["b"],
        initial_state_source=pool,
        initial_state_indices=slots,
        cu_seqlens=cu,
        use_qk_l2norm_in_kernel=True,
        softplus_beta=1.0,
        softplus_threshold=20.0,
    )
    assert o.shape == (1, total, HV, VD)
    g, beta = ops.gdn_gating(x["A_log"], x["a"], x["b"], x["dt_bias"])
    qn = ops._l2norm(x["q"][0].repeat_interleave(HV // H, 1))
    kn = ops._l2norm(x["k"][0].repeat_interleave(HV // H, 1))
    for i in range(len(lengths)):
        s, e = int(cu[i]), int(cu[i + 1])
        want_o, want_s = _ref_delta_rule(
            qn[s:e], kn[s:e], x["v"][0, s:e], g[s:e], beta[s:e], before[slots[i]], KD**-0.5
        )
        torch.testing.assert_close(o[0, s:e].double(), want_o, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(pool[slots[i]].double(), want_s, atol=2e-5, rtol=1e-4)
    untouched = [j for j in range(6) if j not in slots.tolist()]
    torch.testing.assert_close(pool[untouched], before[untouched], atol=0, rtol=0)


def test_chunked_prefill_then_decode_equals_one_long_recurrence() -> None:
    """Prefill with the chunked op, then decode token by token with the fused update: the
    same as running the recurrence over everything."""
    total, prefill = 100, 70
    x = _inputs(total, seed=9)
    g, beta = ops.gdn_gating(x["A_log"], x["a"], x["b"], x["dt_bias"])
    _, final, _ = ops.chunk_gated_delta_rule(
        x["q"][:, :prefill],
        x["k"][:, :prefill],
        x["v"][:, :prefill],
        g[None, :prefill],
        beta[None, :prefill],
        None,
        torch.tensor([0, prefill]),
        True,
    )
    pool = final.clone()
    outs = []
    for t in range(prefill, total):
        outs.append(
            ops.sigmoid_gating_delta_rule_update(
                x["A_log"],
                x["dt_bias"],
                x["q"][:, t : t + 1],
                x["k"][:, t : t + 1],
                x["v"][:, t : t + 1],
                x["a"][t : t + 1],
                x["b"][t : t + 1],
                pool,
                torch.tensor([0]),
                torch.tensor([0, 1]),
                True,
            )
        )
    qn = ops._l2norm(x["q"][0].repeat_interleave(HV // H, 1))
    kn = ops._l2norm(x["k"][0].repeat_interleave(HV // H, 1))
    want_o, want_s = _ref_delta_rule(qn, kn, x["v"][0], g, beta, torch.zeros(HV, KD, VD), KD**-0.5)
    torch.testing.assert_close(
        torch.cat(outs, 1)[0].double(), want_o[prefill:], atol=2e-5, rtol=1e-4
    )
    torch.testing.assert_close(pool[0].double(), want_s, atol=2e-5, rtol=1e-4)


def test_delta_rule_keeps_the_input_dtype_for_outputs() -> None:
    x = _inputs(10, seed=6)
    g, beta = ops.gdn_gating(x["A_log"], x["a"], x["b"], x["dt_bias"])
    bf = {k: x[k].to(torch.bfloat16) for k in ("q", "k", "v")}
    o, final = K_OPS.chunk_gated_delta_rule_cpu(
        bf["q"],
        bf["k"],
        bf["v"],
        g[None],
        beta[None],
        None,
        True,
        torch.tensor([0, 10]),
        False,
        True,
    )
    assert o.dtype == torch.bfloat16
    assert final.dtype == torch.float32


# --- causal conv1d ------------------------------------------------------------------------


DIM, WIDTH = 12, 4


def _conv_params(seed: int, with_bias: bool = True) -> tuple[Any, Any]:
    g = _gen(seed)
    weight = torch.randn(DIM, WIDTH, generator=g)
    bias = torch.randn(DIM, generator=g) if with_bias else None
    return weight, bias


@pytest.mark.parametrize("silu", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv1d_fwd_matches_reference_and_leaves_last_inputs(silu: bool, with_bias: bool) -> None:
    weight, bias = _conv_params(1, with_bias)
    lengths = [5, 1, 9]
    cu = torch.tensor([0, 5, 6, 15])
    x = torch.randn(DIM, 15, generator=_gen(2))
    states = torch.randn(5, DIM, WIDTH - 1, generator=_gen(3))
    before = states.clone()
    slots = torch.tensor([3, 0, 1])
    has_init = torch.tensor([True, True, False])
    out = K_OPS.causal_conv1d_fwd_cpu(x, weight, bias, states, cu, slots, has_init, silu, -1, True)
    assert out.shape == x.shape
    for i in range(len(lengths)):
        s, e = int(cu[i]), int(cu[i + 1])
        prev = before[slots[i]] if has_init[i] else torch.zeros(DIM, WIDTH - 1)
        want, last = _ref_conv(x[:, s:e], weight, bias, prev, silu)
        torch.testing.assert_close(out[:, s:e].double(), want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(states[slots[i]].double(), last, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(states[[2, 4]], before[[2, 4]], atol=0, rtol=0)


def test_conv1d_fwd_accepts_the_transposed_token_major_view() -> None:
    """The backend passes `mixed_qkv.transpose(0, 1)`: a non-contiguous [dim, tokens] view."""
    weight, bias = _conv_params(4)
    tokens_major = torch.randn(8, DIM, generator=_gen(5))
    states = torch.zeros(1, DIM, WIDTH - 1)
    out = K_OPS.causal_conv1d_fwd_cpu(
        tokens_major.transpose(0, 1),
        weight,
        bias,
        states,
        torch.tensor([0, 8]),
        torch.tensor([0]),
        torch.tensor([False]),
        True,
        -1,
        True,
    )
    want, _ = _ref_conv(tokens_major.T.contiguous(), weight, bias, torch.zeros(DIM, 3), True)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)


def test_conv1d_fwd_equals_repeated_update() -> None:
    weight, bias = _conv_params(6)
    x = torch.randn(DIM, 11, generator=_gen(7))
    start = torch.randn(1, DIM, WIDTH - 1, generator=_gen(8))
    fwd_states = start.clone()
    out = K_OPS.causal_conv1d_fwd_cpu(
        x,
        weight,
        bias,
        fwd_states,
        torch.tensor([0, 11]),
        torch.tensor([0]),
        torch.tensor([True]),
        True,
        -1,
        True,
    )
    upd_states = start.clone()
    steps = [
        K_OPS.causal_conv1d_update_cpu(
            x[:, t][None], upd_states, weight, bias, True, None, torch.tensor([0]), -1, True
        )
        for t in range(11)
    ]
    torch.testing.assert_close(torch.cat(steps, 0).T, out, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(upd_states, fwd_states, atol=0, rtol=0)


def test_conv1d_update_batch_uses_its_slots_and_skips_padding() -> None:
    weight, bias = _conv_params(9)
    states = torch.randn(4, DIM, WIDTH - 1, generator=_gen(10))
    before = states.clone()
    x = torch.randn(3, DIM, generator=_gen(11))
    out = K_OPS.causal_conv1d_update_cpu(
        x, states, weight, bias, False, None, torch.tensor([2, -1, 0]), -1, True
    )
    assert out.shape == x.shape
    for row, slot in ((0, 2), (2, 0)):
        want, last = _ref_conv(x[row][:, None], weight, bias, before[slot], False)
        torch.testing.assert_close(out[row].double(), want[:, 0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(states[slot].double(), last, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(states[[1, 3]], before[[1, 3]], atol=0, rtol=0)


# --- gated RMSNorm ------------------------------------------------------------------------


def test_rmsnorm_gated() -> None:
    g = _gen(12)
    x = torch.randn(5, 16, generator=g)
    z = torch.randn(5, 16, generator=g)
    w = torch.randn(16, generator=g)
    out = K_OPS.fused_rmsnorm_gated_cpu(x, w, z, 1e-6)
    want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w * torch.nn.functional.silu(z)
    torch.testing.assert_close(out, want)
    bf = K_OPS.fused_rmsnorm_gated_cpu(x.bfloat16(), w, z.bfloat16(), 1e-6)
    assert bf.dtype == torch.bfloat16


def test_registration_is_idempotent() -> None:
    assert ops.register() == []
    for name in ops._SCHEMAS:
        assert hasattr(torch.ops.sgl_kernel, name)
