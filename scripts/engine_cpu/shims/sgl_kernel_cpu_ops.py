"""Test-only pure-torch stand-ins for the `sgl_kernel` CPU ops the tiny hybrid model calls
(never copied into an image).

Stands in for: the CPU kernels sglang-kt's `sgl_kernel` registers as `torch.ops.sgl_kernel.*`
(AVX-512/AMX C++). The CUDA `sgl_kernel` package installed in the engine virtualenv carries no
CPU library, and the `sgl_kernel` shim next to this file loads none, so these ops are absent.
sglang-kt's gated-delta-net (Qwen3-Next "linear_attention") layers bind several of them at
import time without probing for them, so they are registered here, written from the math:

  causal_conv1d_fwd_cpu                          depthwise causal conv1d over a packed batch
  causal_conv1d_update_cpu                       the same, one new token per sequence
  fused_gdn_gating_cpu                           the decay and write gates: g = -exp(A_log) *
                                                 softplus(a + dt_bias), beta = sigmoid(b)
  chunk_gated_delta_rule_cpu                     gated delta rule over a prefill, chunk by chunk
  fused_sigmoid_gating_delta_rule_update_cpu     gating + one recurrent delta-rule step per token
  fused_rmsnorm_gated_cpu                        rmsnorm(x) * weight * silu(z)

They are correct, not fast: fine for a 64-wide test model. Everything is computed in float32
and cast back to the input dtype, as the real kernels do.

The gated delta rule (per value head; state S is K x V; q, k are l2-normalised when asked):

    S <- exp(g_t) * S
    u_t = beta_t * (v_t - S^T k_t)
    S <- S + k_t u_t^T
    o_t = scale * S^T q_t                       (scale = K ** -0.5)

`chunk_gated_delta_rule` evaluates the same recurrence 64 tokens at a time in closed form (see
`_chunk_step`), and also returns the state at the start of every chunk: the scheduler keeps
those as prefix-cache checkpoints (the FLA kernel's `h`). Import has no side effect beyond
registering the ops, and registers nothing when an `sgl_kernel` op of that name exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

# The FLA kernels' chunk length; prefix-cache checkpoints sit at multiples of it.
CHUNK_SIZE = 64
L2NORM_EPS = 1e-6

NAMESPACE = "sgl_kernel"


# ---------------------------------------------------------------------------------------------
# math (plain functions; the registered ops below are thin wrappers)
# ---------------------------------------------------------------------------------------------


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


def _softplus(x: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
    bx = beta * x
    return torch.where(bx <= threshold, torch.log1p(torch.exp(bx)) / beta, x)


def gdn_gating(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b); both float32.

    a, b: [T, HV]; A_log, dt_bias: [HV]."""
    x = a.float() + dt_bias.float()
    g = -torch.exp(A_log.float()) * _softplus(x, softplus_beta, softplus_threshold)
    return g, torch.sigmoid(b.float())


def conv1d_varlen(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor | None,
    query_start_loc: torch.Tensor | None,
    cache_indices: torch.Tensor | None,
    has_initial_state: torch.Tensor | None,
    silu: bool,
    pad_slot_id: int = -1,
) -> torch.Tensor:
    """Depthwise causal conv1d over a packed batch.

    x: [dim, total_tokens] (sequences packed along tokens, bounds in query_start_loc);
    weight: [dim, width]; conv_states: [slots, dim, width - 1], oldest input first. Sequence i
    continues from conv_states[cache_indices[i]] when has_initial_state[i] (else from zeros),
    and leaves its last width - 1 inputs there. Returns [dim, total_tokens] in x's dtype."""
    dim, total = x.shape
    width = weight.shape[-1]
    w = weight.float()
    out = torch.empty((dim, total), dtype=x.dtype, device=x.device)
    bounds = [0, total] if query_start_loc is None else [int(v) for v in query_start_loc.tolist()]
    for i in range(len(bounds) - 1):
        start, end = bounds[i], bounds[i + 1]
        slot = int(cache_indices[i]) if cache_indices is not None else -1
        if slot == pad_slot_id:
            continue
        seq = x[:, start:end].float()
        if (
            conv_states is not None
            and slot >= 0
            and has_initial_state is not None
            and bool(has_initial_state[i])
        ):
            prev = conv_states[slot].float()
        else:
            prev = seq.new_zeros((dim, width - 1))
        full = torch.cat([prev, seq], dim=1)  # [dim, width - 1 + L]
        # out[:, t] = sum_j w[:, j] * full[:, t + j]
        windows = full.unfold(1, width, 1)  # [dim, L, width]
        y = (windows * w[:, None, :]).sum(-1)
        if bias is not None:
            y = y + bias.float()[:, None]
        if silu:
            y = F.silu(y)
        out[:, start:end] = y.to(x.dtype)
        if conv_states is not None and slot >= 0:
            conv_states[slot] = full[:, full.shape[1] - (width - 1) :].to(conv_states.dtype)
    return out


def conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
    conv_state_indices: torch.Tensor | None,
    pad_slot_id: int = -1,
) -> torch.Tensor:
    """One decode step of the causal conv1d: x [batch, dim] (or [batch, dim, seqlen]) is
    appended to conv_state[conv_state_indices[b]] ([dim, width - 1]), which keeps the newest
    width - 1 inputs. Returns the convolved x, same shape and dtype."""
    squeeze = x.dim() == 2
    xs = x.unsqueeze(-1) if squeeze else x
    batch = xs.shape[0]
    width = weight.shape[-1]
    w = weight.float()
    out = torch.zeros_like(xs)
    for b in range(batch):
        slot = int(conv_state_indices[b]) if conv_state_indices is not None else b
        if slot == pad_slot_id:
            continue
        full = torch.cat([conv_state[slot].float(), xs[b].float()], dim=1)
        y = (full.unfold(1, width, 1) * w[:, None, :]).sum(-1)  # [dim, seqlen]
        if bias is not None:
            y = y + bias.float()[:, None]
        if silu:
            y = F.silu(y)
        out[b] = y.to(x.dtype)
        conv_state[slot] = full[:, full.shape[1] - (width - 1) :].to(conv_state.dtype)
    return out.squeeze(-1) if squeeze else out


def _expand_heads(x: torch.Tensor, hv: int) -> torch.Tensor:
    """[T, H, K] -> [T, HV, K]: value head j reads key/query head j // (HV // H)."""
    h = x.shape[1]
    return x if h == hv else x.repeat_interleave(hv // h, dim=1)


def recurrent_step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One token of the gated delta rule for all value heads, in place on `state` [HV, K, V]
    (float32). q, k: [HV, K] (already normalised); v: [HV, V]; g, beta: [HV]. Returns o [HV, V]."""
    state.mul_(torch.exp(g)[:, None, None])
    u = beta[:, None] * (v - torch.einsum("hkv,hk->hv", state, k))
    state.add_(k[:, :, None] * u[:, None, :])
    return torch.einsum("hkv,hk->hv", state, q * scale)


def _chunk_step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """C tokens of the gated delta rule at once (per head; all float32).

    state S0 [HV, K, V]; q, k [HV, C, K]; v [HV, C, V]; g, beta [HV, C]. With G_t the running
    sum of g inside the chunk, unrolling the recurrence gives
        S_t = e^{G_t} S0 + sum_{s<=t} e^{G_t - G_s} k_s u_s^T
        u_t = beta_t (v_t - e^{G_t} S0^T k_t - sum_{s<t} e^{G_t - G_s} (k_t . k_s) u_s)
    i.e. (I + A) U = beta (V - e^G K S0) with A[t, s] = beta_t e^{G_t - G_s} k_t . k_s (s < t),
    a unit lower-triangular solve. Then
        o_t = scale (e^{G_t} S0^T q_t + sum_{s<=t} e^{G_t - G_s} (q_t . k_s) u_s)
        S_C = e^{G_C} S0 + sum_s e^{G_C - G_s} k_s u_s^T.
    Returns (o [HV, C, V], S_C [HV, K, V])."""
    c = q.shape[1]
    G = torch.cumsum(g, dim=1)  # [HV, C]
    diff = G[:, :, None] - G[:, None, :]  # G_t - G_s
    lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    decay = torch.where(lower, torch.exp(torch.where(lower, diff, 0.0)), 0.0)  # s <= t
    kk = k @ k.transpose(1, 2)  # [HV, C, C]
    A = beta[:, :, None] * decay * kk
    A = A.tril(-1)
    eye = torch.eye(c, dtype=q.dtype, device=q.device)
    eG = torch.exp(G)[:, :, None]  # [HV, C, 1]
    rhs = beta[:, :, None] * (v - eG * (k @ state))
    U = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    qs = q * scale
    o = eG * (qs @ state) + ((qs @ k.transpose(1, 2)) * decay) @ U
    tail = torch.exp(G[:, -1:] - G)[:, :, None]  # e^{G_C - G_s}
    new_state = torch.exp(G[:, -1])[:, None, None] * state + (k * tail).transpose(1, 2) @ U
    return o, new_state


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    use_qk_l2norm: bool,
    scale: float | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gated delta rule over packed sequences, chunk by chunk.

    q, k: [1, T, H, K]; v: [1, T, HV, V]; g, beta: [1, T, HV]; initial_state: [N, HV, K, V]
    (one per sequence; zeros when None); cu_seqlens: [N + 1]. Returns
    (o [1, T, HV, V] in v's dtype, final states [N, HV, K, V] float32,
    h [1, sum_i ceil(L_i / chunk), HV, K, V] float32: sequence i's state before each of its
    chunks, packed in order, as FLA's chunk kernel returns it)."""
    assert q.shape[0] == 1, "packed (varlen) layout only"
    total, _, kdim = q.shape[1:]
    hv, vdim = v.shape[2], v.shape[3]
    if scale is None:
        scale = kdim**-0.5
    bounds = [0, total] if cu_seqlens is None else [int(x) for x in cu_seqlens.tolist()]
    n = len(bounds) - 1
    qf = _expand_heads(q[0].float(), hv)
    kf = _expand_heads(k[0].float(), hv)
    if use_qk_l2norm:
        qf, kf = _l2norm(qf), _l2norm(kf)
    vf, gf, bf = v[0].float(), g[0].float(), beta[0].float()
    out = torch.zeros((total, hv, vdim), dtype=torch.float32, device=q.device)
    finals = torch.zeros((n, hv, kdim, vdim), dtype=torch.float32, device=q.device)
    hs: list[torch.Tensor] = []
    for i in range(n):
        start, end = bounds[i], bounds[i + 1]
        if initial_state is not None:
            state = initial_state[i].float().clone()
        else:
            state = torch.zeros((hv, kdim, vdim), dtype=torch.float32, device=q.device)
        for c0 in range(start, end, chunk_size):
            c1 = min(c0 + chunk_size, end)
            hs.append(state)
            o, state = _chunk_step(
                state,
                qf[c0:c1].transpose(0, 1),
                kf[c0:c1].transpose(0, 1),
                vf[c0:c1].transpose(0, 1),
                gf[c0:c1].transpose(0, 1),
                bf[c0:c1].transpose(0, 1),
                scale,
            )
            out[c0:c1] = o.transpose(0, 1)
        finals[i] = state
    if hs:
        h = torch.stack(hs).unsqueeze(0)
    else:
        h = torch.zeros((1, 0, hv, kdim, vdim), dtype=torch.float32, device=q.device)
    return out.unsqueeze(0).to(v.dtype), finals, h


def sigmoid_gating_delta_rule_update(
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state_source: torch.Tensor | None,
    initial_state_indices: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    use_qk_l2norm: bool,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
    scale: float | None = None,
) -> torch.Tensor:
    """Gating plus the recurrent gated delta rule, token by token (the decode path).

    q, k: [1, T, H, K]; v: [1, T, HV, V]; a, b: [T, HV]; initial_state_source: [slots, HV, K, V]
    updated in place at initial_state_indices[i] for sequence i (a negative index: start from
    zeros, store nothing). Returns o [1, T, HV, V] in q's dtype."""
    total, _, kdim = q.shape[1:]
    hv, vdim = v.shape[2], v.shape[3]
    if scale is None:
        scale = kdim**-0.5
    bounds = [0, total] if cu_seqlens is None else [int(x) for x in cu_seqlens.tolist()]
    g, beta = gdn_gating(
        A_log,
        a.reshape(total, hv),
        b.reshape(total, hv),
        dt_bias,
        softplus_beta,
        softplus_threshold,
    )
    qf = _expand_heads(q[0].float(), hv)
    kf = _expand_heads(k[0].float(), hv)
    if use_qk_l2norm:
        qf, kf = _l2norm(qf), _l2norm(kf)
    vf = v[0].float()
    out = torch.zeros((total, hv, vdim), dtype=torch.float32, device=q.device)
    for i in range(len(bounds) - 1):
        start, end = bounds[i], bounds[i + 1]
        slot = int(initial_state_indices[i]) if initial_state_indices is not None else -1
        if initial_state_source is not None and slot >= 0:
            state = initial_state_source[slot].float().clone()
        else:
            state = torch.zeros((hv, kdim, vdim), dtype=torch.float32, device=q.device)
        for t in range(start, end):
            out[t] = recurrent_step(state, qf[t], kf[t], vf[t], g[t], beta[t], scale)
        if initial_state_source is not None and slot >= 0:
            initial_state_source[slot] = state.to(initial_state_source.dtype)
    return out.unsqueeze(0).to(q.dtype)


def rmsnorm_gated(
    x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """rmsnorm over the last dim, times weight, times silu(z) (norm before gate)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    if z is not None:
        y = y * F.silu(z.float())
    return y.to(x.dtype)


# ---------------------------------------------------------------------------------------------
# registration as torch.ops.sgl_kernel.*
# ---------------------------------------------------------------------------------------------


def _exists(name: str) -> bool:
    try:
        return hasattr(getattr(torch.ops, NAMESPACE), name)
    except (AttributeError, RuntimeError):
        return False


_SCHEMAS: dict[str, str] = {
    "causal_conv1d_fwd_cpu": (
        "(Tensor x, Tensor weight, Tensor? bias, Tensor(a!)? conv_states, "
        "Tensor? query_start_loc, Tensor? cache_indices, Tensor? has_initial_state, "
        "bool silu_activation, int pad_slot_id, bool is_vllm_layout) -> Tensor"
    ),
    "causal_conv1d_update_cpu": (
        "(Tensor x, Tensor(a!) conv_state, Tensor weight, Tensor? bias, bool silu_activation, "
        "Tensor? cache_seqlens, Tensor? conv_state_indices, int pad_slot_id, "
        "bool is_vllm_layout) -> Tensor"
    ),
    "fused_gdn_gating_cpu": (
        "(Tensor A_log, Tensor a, Tensor b, Tensor dt_bias) -> (Tensor, Tensor)"
    ),
    "chunk_gated_delta_rule_cpu": (
        "(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor? initial_state, "
        "bool output_final_state, Tensor? cu_seqlens, bool head_first, "
        "bool use_qk_l2norm_in_kernel) -> (Tensor, Tensor)"
    ),
    "fused_sigmoid_gating_delta_rule_update_cpu": (
        "(Tensor A_log, Tensor dt_bias, Tensor q, Tensor k, Tensor v, Tensor a, Tensor b, "
        "Tensor(a!)? initial_state_source, Tensor? initial_state_indices, "
        "Tensor? cu_seqlens, bool use_qk_l2norm_in_kernel, float softplus_beta=1.0, "
        "float softplus_threshold=20.0) -> Tensor"
    ),
    "fused_rmsnorm_gated_cpu": "(Tensor x, Tensor weight, Tensor? z, float eps) -> Tensor",
}


Tensor = torch.Tensor
OptTensor = torch.Tensor | None


def _causal_conv1d_fwd_cpu(
    x: Tensor,
    weight: Tensor,
    bias: OptTensor,
    conv_states: OptTensor,
    query_start_loc: OptTensor,
    cache_indices: OptTensor,
    has_initial_state: OptTensor,
    silu_activation: bool,
    pad_slot_id: int,
    is_vllm_layout: bool,
) -> Tensor:
    """Stands in for sgl_kernel's CPU `causal_conv1d_fwd_cpu` (prefill conv of a GDN layer;
    x [dim, tokens], conv_states updated in place)."""
    assert is_vllm_layout, "only the packed [dim, tokens] layout"
    return conv1d_varlen(
        x,
        weight,
        bias,
        conv_states,
        query_start_loc,
        cache_indices,
        has_initial_state,
        silu_activation,
        pad_slot_id,
    )


def _causal_conv1d_update_cpu(
    x: Tensor,
    conv_state: Tensor,
    weight: Tensor,
    bias: OptTensor,
    silu_activation: bool,
    cache_seqlens: OptTensor,
    conv_state_indices: OptTensor,
    pad_slot_id: int,
    is_vllm_layout: bool,
) -> Tensor:
    """Stands in for sgl_kernel's CPU `causal_conv1d_update_cpu` (decode conv of a GDN
    layer; conv_state updated in place)."""
    assert cache_seqlens is None, "circular conv state buffers are not supported"
    return conv1d_update(
        x, conv_state, weight, bias, silu_activation, conv_state_indices, pad_slot_id
    )


def _fused_gdn_gating_cpu(
    A_log: Tensor, a: Tensor, b: Tensor, dt_bias: Tensor
) -> tuple[Tensor, Tensor]:
    """Stands in for sgl_kernel's CPU `fused_gdn_gating_cpu`: (g, beta) as [1, T, HV] float32."""
    g, beta = gdn_gating(A_log, a, b, dt_bias)
    return g.unsqueeze(0), beta.unsqueeze(0)


def _chunk_gated_delta_rule_cpu(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    initial_state: OptTensor,
    output_final_state: bool,
    cu_seqlens: OptTensor,
    head_first: bool,
    use_qk_l2norm_in_kernel: bool,
) -> tuple[Tensor, Tensor]:
    """Stands in for sgl_kernel's CPU `chunk_gated_delta_rule_cpu` (the prefill of a GDN
    layer): returns (o, final state). The per-chunk states come from
    `chunk_gated_delta_rule` directly (see hybrid_patches)."""
    assert not head_first, "only the [1, T, H, D] layout"
    o, final, _ = chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state, cu_seqlens, use_qk_l2norm_in_kernel
    )
    return o, final


def _fused_sigmoid_gating_delta_rule_update_cpu(
    A_log: Tensor,
    dt_bias: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    initial_state_source: OptTensor,
    initial_state_indices: OptTensor,
    cu_seqlens: OptTensor,
    use_qk_l2norm_in_kernel: bool,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> Tensor:
    """Stands in for sgl_kernel's CPU `fused_sigmoid_gating_delta_rule_update_cpu` (the
    decode step of a GDN layer; states updated in place)."""
    return sigmoid_gating_delta_rule_update(
        A_log,
        dt_bias,
        q,
        k,
        v,
        a,
        b,
        initial_state_source,
        initial_state_indices,
        cu_seqlens,
        use_qk_l2norm_in_kernel,
        softplus_beta,
        softplus_threshold,
    )


def _fused_rmsnorm_gated_cpu(x: Tensor, weight: Tensor, z: OptTensor, eps: float) -> Tensor:
    """Stands in for sgl_kernel's CPU `fused_rmsnorm_gated_cpu` (the gated RMSNorm on a GDN
    layer's output: rmsnorm(x) * weight * silu(z))."""
    return rmsnorm_gated(x, weight, z, eps)


_IMPLS: dict[str, Callable[..., Any]] = {
    "causal_conv1d_fwd_cpu": _causal_conv1d_fwd_cpu,
    "causal_conv1d_update_cpu": _causal_conv1d_update_cpu,
    "fused_gdn_gating_cpu": _fused_gdn_gating_cpu,
    "chunk_gated_delta_rule_cpu": _chunk_gated_delta_rule_cpu,
    "fused_sigmoid_gating_delta_rule_update_cpu": _fused_sigmoid_gating_delta_rule_update_cpu,
    "fused_rmsnorm_gated_cpu": _fused_rmsnorm_gated_cpu,
}

_LIBRARY: torch.library.Library | None = None
REGISTERED: list[str] = []


def register() -> list[str]:
    """Define the ops that `torch.ops.sgl_kernel` lacks; returns the names defined now."""
    global _LIBRARY
    todo = [name for name in _SCHEMAS if name not in REGISTERED and not _exists(name)]
    if not todo:
        return []
    if _LIBRARY is None:
        # FRAGMENT: another library (a real sgl_kernel) may own the namespace.
        _LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")  # type: ignore[no-untyped-call]
    for name in todo:
        _LIBRARY.define(name + _SCHEMAS[name])  # type: ignore[no-untyped-call]
        # CompositeExplicitAutograd: one implementation for every device (CPU here).
        _LIBRARY.impl(name, _IMPLS[name], "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
        REGISTERED.append(name)
    return todo


register()
