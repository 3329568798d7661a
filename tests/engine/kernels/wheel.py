"""Load single files, or single functions, from the unzipped sglang-kt wheel.

Importing through `sglang` would run its package `__init__` (the whole frontend); the files
the kernels copy need only torch (and triton), so they are loaded by path under private
names. A function inside a module that needs CUDA-only packages is compiled on its own from
the file's source, without its decorators (e.g. `torch.compile`), in a namespace that holds
only what it uses.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from engine.patches.kernels.kda_decode import KdaDecodeInputs


class WheelCode:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, module: str) -> Path:
        return self.root / (module.replace(".", "/") + ".py")

    def module(self, module: str) -> types.ModuleType:
        """Execute one wheel file as a standalone module (cached per session)."""
        name = "wheel_" + module.replace(".", "_")
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, self.path(module))
        assert spec is not None
        assert spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod

    def function(self, module: str, name: str, namespace: dict[str, Any] | None = None) -> Any:
        """Compile one top-level function of a wheel file, decorators dropped."""
        tree = ast.parse(self.path(module).read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                node.decorator_list = []
                code = compile(
                    ast.Module(body=[node], type_ignores=[]), str(self.path(module)), "exec"
                )
                scope: dict[str, Any] = {"torch": torch, "Optional": Any, **(namespace or {})}
                exec(code, scope)
                return scope[name]
        raise LookupError(f"{name} not found in {module}")

    def kda_decode_chain(self, inp: KdaDecodeInputs) -> torch.Tensor:
        """What the wheel runs for one KDA decode step on a GPU, on the fused kernel's inputs
        (states updated in place): three Triton conv updates, then its bounded-gate decode
        kernel. Returns `[1, B, HV, V]`."""
        conv = self.module("sglang.srt.layers.attention.mamba.causal_conv1d_triton")
        ops = self.module("sglang.srt.layers.attention.linear.kernels.glm5_next_kda_ops")
        batch = inp.mixed_qkv.shape[0]
        heads, d = inp.num_heads, inp.head_k_dim
        dim = heads * d
        q, k, v = (
            conv.causal_conv1d_update(
                inp.mixed_qkv[:, i * dim : (i + 1) * dim],
                inp.conv_states[i],
                inp.conv_weights[i],
                inp.conv_biases[i],
                activation="silu",
                conv_state_indices=inp.cache_indices,
            ).reshape(1, batch, heads, d)
            for i in range(3)
        )
        out: torch.Tensor = ops.glm5_next_safe_decode(
            A_log=inp.a_log,
            raw_gate=inp.raw_gate.reshape(1, batch, heads, d),
            dt_bias=inp.dt_bias,
            lower_bound=inp.lower_bound,
            q=q,
            k=k,
            v=v,
            raw_beta=inp.raw_beta.reshape(1, batch, heads),
            state_source=inp.ssm_states,
            state_indices=inp.cache_indices,
            query_start_loc=torch.arange(batch + 1, dtype=torch.int32, device=q.device),
            use_qk_l2norm_in_kernel=True,
        )
        return out.reshape(1, batch, heads, inp.head_v_dim)
