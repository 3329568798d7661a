"""The patched GLM KDA backend end to end on CPU, with reference kernels in place of Triton's.

This runs the device check's own sequence (reference run; snapshot, restore, continue; decode
snapshots; zero-state control) through `SnapshotKDAAttnBackend` and the stock GLM backend
code around it. The conv and KDA kernels are small torch references with the kernels'
contracts (conv windows in the pool's layout, the final state written in place, `h` as the
state at each 64-token chunk start), so this checks our wiring and layout, not the kernels.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from engine.patches.prefix_cache.device_check import run_checks, run_head_checks
from engine.patches.prefix_cache.rig import make_rig
from tests.engine.prefix_cache.builders import (
    global_server_args,
    prefix_cache_on,
    server_args,
    wheel,
)

CHUNK = 64


def conv_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Any,
    activation: str,
    conv_states: torch.Tensor,
    has_initial_state: torch.Tensor,
    cache_indices: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens_cpu: Any,
) -> torch.Tensor:
    """causal_conv1d_fn: x [dim, T] packed; conv_states [slots, dim, K-1] (a view)."""
    width = weight.shape[1]
    out = torch.empty_like(x)
    for i in range(len(cache_indices)):
        s, e = int(query_start_loc[i]), int(query_start_loc[i + 1])
        slot = int(cache_indices[i])
        init = conv_states[slot].to(x.dtype)
        if not bool(has_initial_state[i]):
            init = torch.zeros_like(init)
        full = torch.cat([init, x[:, s:e]], dim=1).float()
        windows = full.unfold(1, width, 1)  # [dim, L, K]
        out[:, s:e] = F.silu((windows * weight[:, None, :]).sum(-1)).to(x.dtype)
        conv_states[slot] = full[:, -(width - 1) :].to(conv_states.dtype)
    return out


def conv_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: Any,
    activation: str,
    conv_state_indices: torch.Tensor,
) -> torch.Tensor:
    """causal_conv1d_update: x [bs, dim]; conv_state [slots, dim, K-1] (a view)."""
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        slot = int(conv_state_indices[i])
        full = torch.cat([conv_state[slot].float(), x[i, :, None].float()], dim=1)
        out[i] = F.silu((full * weight).sum(-1)).to(x.dtype)
        conv_state[slot] = full[:, 1:].to(conv_state.dtype)
    return out


def _step(state: torch.Tensor, q: Any, k: Any, v: Any, gate: Any, beta: Any) -> Any:
    """A toy gated delta-style recurrence: [H, D, D] state, per-head decay and write strength."""
    # Slow decay, so a wrong initial state stays visible for hundreds of tokens.
    state = state * torch.sigmoid(0.1 * gate + 6.0)[..., None] + torch.sigmoid(beta)[
        :, None, None
    ] * (k[..., :, None] * v[..., None, :])
    return state, torch.einsum("hd,hde->he", q, state)


class ReferenceKernel:
    def __init__(self, fla_kda: Any) -> None:
        self._fla_kda = fla_kda

    def extend(self, q: Any, k: Any, v: Any, g: Any, beta: Any, **kw: Any) -> torch.Tensor:
        ssm, idx, qsl = kw["ssm_states"], kw["cache_indices"], kw["query_start_loc"]
        heads, dim = q.shape[2], q.shape[3]
        gate = g.float().reshape(-1, heads, dim)
        out = torch.empty(q.shape[1:], dtype=torch.float32)
        chunk_states = []
        for i in range(len(idx)):
            s, e = int(qsl[i]), int(qsl[i + 1])
            state = ssm[int(idx[i])].float()
            for t in range(s, e):
                if (t - s) % CHUNK == 0:
                    chunk_states.append(state)
                state, out[t] = _step(
                    state, q[0, t].float(), k[0, t].float(), v[0, t].float(), gate[t], beta[0, t]
                )
            ssm[int(idx[i])] = state.to(ssm.dtype)
        # Hand h over the way chunk_kda does: through fla.kda's module global.
        self._fla_kda.chunk_gated_delta_rule_fwd_h(h=torch.stack(chunk_states).unsqueeze(0))
        return out.unsqueeze(0).to(q.dtype)

    def decode(self, q: Any, k: Any, v: Any, a: Any, b: Any, **kw: Any) -> torch.Tensor:
        ssm, idx = kw["ssm_states"], kw["cache_indices"]
        heads, dim = q.shape[2], q.shape[3]
        gate = a.float().reshape(-1, heads, dim)
        out = torch.empty(q.shape[1:], dtype=torch.float32)
        for i in range(q.shape[1]):
            state = ssm[int(idx[i])].float()
            state, out[i] = _step(
                state, q[0, i].float(), k[0, i].float(), v[0, i].float(), gate[i], b[0, i]
            )
            ssm[int(idx[i])] = state.to(ssm.dtype)
        return out.unsqueeze(0).to(q.dtype)


@pytest.fixture
def reference_kernels(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    backend_module = wheel("sglang.srt.layers.attention.linear.glm5_next_kda_backend")
    fla_kda = wheel("sglang.srt.layers.attention.fla.kda")
    monkeypatch.setattr(backend_module, "causal_conv1d_fn", conv_fn)
    monkeypatch.setattr(backend_module, "causal_conv1d_update", conv_update)
    monkeypatch.setattr(
        backend_module, "rearrange", lambda x, pattern, d: x.reshape(1, x.shape[0], -1, d)
    )
    # The stock chunk-state kernel, as chunk_kda sees it (our capture wraps whatever is here).
    monkeypatch.setattr(fla_kda, "chunk_gated_delta_rule_fwd_h", lambda h: (h, None))
    with prefix_cache_on():
        args = server_args()
        args._validate_glm5_next_session_ab_boundary()
        with global_server_args(args):
            yield fla_kda


def _rig(fla_kda: Any) -> Any:
    rig = make_rig(tokens=800, heads=2, head_dim=16, seed=0, device="cpu")
    rig.backend.kernel = ReferenceKernel(fla_kda)
    return rig


def test_the_patched_backend_is_what_the_registry_builds(reference_kernels: Any) -> None:
    from engine.patches.prefix_cache.kda import SnapshotKDAAttnBackend

    rig = _rig(reference_kernels)
    assert type(rig.backend) is SnapshotKDAAttnBackend
    # The conv window (K-1 = 3) is read from the right axis.
    assert rig.backend.conv_states_shape[-1] == 3


def test_snapshot_restore_continue_matches_the_uninterrupted_run(reference_kernels: Any) -> None:
    assert run_checks(_rig(reference_kernels), n=600, p=256, steps=200, atol=0.0)


def test_without_snapshot_writes_the_check_fails(
    reference_kernels: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.patches.prefix_cache.kda as kda

    monkeypatch.setattr(kda, "write_conv_snapshots", lambda *a, **k: None)
    assert not run_checks(_rig(reference_kernels), n=600, p=256, steps=200, atol=0.0)


def test_a_prefill_cut_at_the_head_matches_the_uncut_run(reference_kernels: Any) -> None:
    assert run_head_checks(_rig(reference_kernels), n=600, head=256, atol=0.0)


def test_without_snapshot_writes_the_head_check_fails(
    reference_kernels: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.patches.prefix_cache.kda as kda

    monkeypatch.setattr(kda, "write_conv_snapshots", lambda *a, **k: None)
    assert not run_head_checks(_rig(reference_kernels), n=600, head=256, atol=0.0)
