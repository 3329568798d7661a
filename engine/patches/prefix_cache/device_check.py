"""KDA snapshot check on any CUDA GPU with sglang-kt 0.7.2 installed (ENGINE.md A).

GLM-5-Next itself refuses SM90, its KDA kernels do not, so this runs on any CUDA GPU. One
KDA layer with random weights, through the patched GLM backend (`SnapshotKDAAttnBackend`):

  reference: extend over N tokens, then D decode steps, from a zero state;
  snapshot:  extend over M tokens with a snapshot at P (a multiple of 256), copy the snapshot
             into a fresh working slot (what a prefix hit does), extend the remaining N - P
             tokens, then the same D decode steps with decode snapshots every 256 tokens.

Outputs and final states must match the reference (up to kernel rounding), for M = P
(snapshot from the final state), M = P + 128 (chunk-aligned, from `h`) and M = P + 200 (from
`h`); a restore from a zeroed slot (what a plain radix tree would do) must not match.

Prompt head (heads.py): a prefill cut at a head at P, the rest extended in the same working
slot, must give the uncut run's outputs and states, with snapshots at P and at the prompt's
aligned end; a second request with the same head and a different tail, restored from the
head's snapshot, must match its own uncut run.

    python -m engine.patches.prefix_cache.device_check [--tokens 1500] [--snapshot 1024]

Exit status 0 when every check passes. Takes well under a minute after Triton compilation.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

import torch

from engine.patches.prefix_cache.alignment import align_down
from engine.patches.prefix_cache.config import TREE_UNIT
from engine.patches.prefix_cache.install import ENV_VAR, install
from engine.patches.prefix_cache.rig import Rig, make_rig, opted_in_server_args, wheel

_STATE_NAMES = ("q conv", "k conv", "v conv", "ssm")


def _diff(a: Any, b: Any) -> float:
    return float((a.float() - b.float()).abs().max())


def run_checks(rig: Rig, n: int, p: int, steps: int, atol: float) -> bool:
    """Reference run vs snapshot/restore runs; prints one line per check.

    Needs p + 200 < n and a multiple of 256 in (n, n + steps] for the decode snapshot.
    """
    if p % TREE_UNIT or p + 200 >= n or (n + steps) // TREE_UNIT * TREE_UNIT <= n:
        raise ValueError(f"bad sizes: n={n} p={p} steps={steps}")
    ok = True

    def check(name: str, value: float, limit: float) -> None:
        nonlocal ok
        passed = value <= limit
        ok &= passed
        print(f"  {'ok  ' if passed else 'FAIL'} {name}: max abs diff {value:.3e} (<= {limit:.1e})")

    print(f"reference: extend 0..{n}, decode {steps} steps")
    ref_slot = int(rig.pool.mamba_pool.alloc(1)[0])
    ref_out, _ = rig.extend(ref_slot, 0, n, track=None)
    ref_after_prefill = rig.states(ref_slot)
    ref_decode = []
    ref_states_at: dict[int, list[torch.Tensor]] = {}
    for t in range(n, n + steps):
        ref_decode.append(rig.decode(ref_slot, t, track_slot=None))
        if (t + 1) % TREE_UNIT == 0:
            ref_states_at[t + 1] = rig.states(ref_slot)

    # Snapshot at the last token (final state), chunk-aligned before it and inside a chunk
    # (both from the per-chunk states h).
    for m in (p, p + 128, p + 200):
        print(f"snapshot run: extend 0..{m}, snapshot expected at {p}")
        slots = [int(s) for s in rig.pool.mamba_pool.alloc(4)]
        first, track = slots[0], (slots[1], slots[2])
        out_first, snapshot = rig.extend(first, 0, m, track=track)
        check("snapshot point", abs((snapshot or 0) - p), 0)
        check("outputs with snapshot writes on", _diff(out_first, ref_out[:, :m]), atol)
        restored = slots[3]
        rig.pool.mamba_pool.copy_from(rig.index([track[0]]), rig.index([restored]))
        out_rest, _ = rig.extend(restored, p, n, track=None)
        check(f"outputs {p}..{n} after restore", _diff(out_rest, ref_out[:, p:n]), atol)
        for name, got, want in zip(
            _STATE_NAMES, rig.states(restored), ref_after_prefill, strict=True
        ):
            check(f"state after {n}: {name}", _diff(got, want), atol)
        decode_track = first  # any free slot other than the working one
        diffs = [
            _diff(rig.decode(restored, t, track_slot=decode_track), ref_decode[t - n])
            for t in range(n, n + steps)
        ]
        check("decode outputs after restore", max(diffs), atol)
        at = max(ref_states_at)
        for name, got, want in zip(
            _STATE_NAMES, rig.states(decode_track), ref_states_at[at], strict=True
        ):
            check(f"decode snapshot at {at}: {name}", _diff(got, want), atol)
        rig.pool.mamba_pool.free(rig.index(slots))

    print("control: restore from a zeroed slot (a plain radix tree's prefix hit)")
    zero = int(rig.pool.mamba_pool.alloc(1)[0])
    control = _diff(rig.extend(zero, p, n, track=None)[0], ref_out[:, p:n])
    discriminates = control > 10 * atol
    ok &= discriminates
    print(f"  {'ok  ' if discriminates else 'FAIL'} zero-state diff {control:.3e} is large")

    return ok


def run_head_checks(rig: Rig, n: int, head: int, atol: float, seed: int = 1) -> bool:
    """A prefill cut at a prompt head, and a second request restoring it; one line per check.

    Needs a head on the unit below the prompt's own aligned end: head % 256 == 0 and
    align_down(n, 256) > head.
    """
    end = align_down(n, TREE_UNIT)
    if head % TREE_UNIT or not 0 < head < end:
        raise ValueError(f"bad sizes: n={n} head={head}")
    ok = True

    def check(name: str, value: float, limit: float) -> None:
        nonlocal ok
        passed = value <= limit
        ok &= passed
        print(f"  {'ok  ' if passed else 'FAIL'} {name}: max abs diff {value:.3e} (<= {limit:.1e})")

    def states_after(view: Rig, tokens: int) -> list[torch.Tensor]:
        slot = int(view.pool.mamba_pool.alloc(1)[0])
        view.extend(slot, 0, tokens, track=None)
        states = view.states(slot)
        view.pool.mamba_pool.free(view.index([slot]))
        return states

    print(f"prompt head: extend 0..{head}, then {head}..{n} in the same slot")
    # A run from token 0 starts from a zeroed slot (alloc zeroes), as a new request's does.
    slots = [int(s) for s in rig.pool.mamba_pool.alloc(6)]
    uncut, working, first_track, second_track, restored, other_uncut = slots
    ref_out, _ = rig.extend(uncut, 0, n, track=None)
    out_head, at_head = rig.extend(working, 0, head, track=(first_track, second_track))
    out_rest, at_end = rig.extend(working, head, n, track=(second_track, first_track))
    check("snapshot points", abs((at_head or 0) - head) + abs((at_end or 0) - end), 0)
    check("outputs of the cut prefill", _diff(torch.cat([out_head, out_rest], 1), ref_out), atol)
    expected = (
        (f"state after {n}", working, rig.states(uncut)),
        (f"head snapshot at {head}", first_track, states_after(rig, head)),
        (f"prompt snapshot at {end}", second_track, states_after(rig, end)),
    )
    for what, slot, want in expected:
        for name, got, ref in zip(_STATE_NAMES, rig.states(slot), want, strict=True):
            check(f"{what}: {name}", _diff(got, ref), atol)

    print(f"same head, another tail: restore {head}, extend {head}..{n}")
    g = torch.Generator(device=rig.qkv.device).manual_seed(seed)

    def other_tail(t: torch.Tensor) -> torch.Tensor:
        tail = torch.randn(t[head:].shape, generator=g, device=t.device).to(t.dtype)
        return torch.cat([t[:head], tail])

    other = dataclasses.replace(
        rig, qkv=other_tail(rig.qkv), gate=other_tail(rig.gate), beta=other_tail(rig.beta)
    )
    other_ref, _ = other.extend(other_uncut, 0, n, track=None)
    rig.pool.mamba_pool.copy_from(rig.index([first_track]), rig.index([restored]))
    other_out, _ = other.extend(restored, head, n, track=None)
    check(f"outputs {head}..{n} after restore", _diff(other_out, other_ref[:, head:n]), atol)
    other_states = zip(_STATE_NAMES, other.states(restored), other.states(other_uncut), strict=True)
    for name, got, ref in other_states:
        check(f"state after {n}: {name}", _diff(got, ref), atol)
    rig.pool.mamba_pool.free(rig.index(slots))
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="KDA snapshot/restore check on a CUDA GPU")
    parser.add_argument("--tokens", type=int, default=1500, help="prefill length N")
    parser.add_argument("--snapshot", type=int, default=1024, help="snapshot point P (x256)")
    parser.add_argument("--decode", type=int, default=300, help="decode steps after prefill")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=128)
    # Same kernels in the same order on both sides: an H200 gave exactly 0 on every check and
    # 3.6e-2 for the zeroed-slot control, so 1e-3 leaves the control a 10x margin to fail by.
    parser.add_argument("--atol", type=float, default=1e-3, help="max abs diff allowed")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing checked")
        return 2
    end = args.tokens + args.decode
    if args.snapshot % TREE_UNIT or not 0 < args.snapshot < args.tokens - 200:
        parser.error(f"--snapshot must be a multiple of {TREE_UNIT} below --tokens - 200")
    if end // TREE_UNIT * TREE_UNIT <= args.tokens:
        parser.error(f"--tokens + --decode must pass a multiple of {TREE_UNIT}")
    if align_down(args.tokens, TREE_UNIT) <= args.snapshot:
        parser.error(f"--tokens must pass a multiple of {TREE_UNIT} above --snapshot")

    installation = install(environ={ENV_VAR: "1"})
    server_args = wheel("sglang.srt.server_args")
    server_args.set_global_server_args_for_scheduler(opted_in_server_args(device_page=64))
    if installation.patcher.count == 0:
        print("patch not applied (see the log): installed sglang-kt is not the pinned 0.7.2")
        return 1

    rig = make_rig(args.tokens + args.decode, args.heads, args.head_dim, args.seed)
    ok = run_checks(rig, args.tokens, args.snapshot, args.decode, args.atol)
    ok &= run_head_checks(rig, args.tokens, args.snapshot, args.atol, args.seed + 1)
    installation.undo()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
