"""Flag names against the pinned sglang-kt, and the upstream renames."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.launch.__main__ import check_flags
from engine.launch.flags import accepted_flags, reconcile
from engine.launch.host import probe
from engine.launch.plan import build_plan
from engine.launch.profile import load_profile
from tests.engine.fixtures.hosts import AMX, REFERENCE, SMALLER_GPU, host_sources
from tests.support.procs import REPO_ROOT
from tests.support.sglang_wheel import sglang_kt_root

PROFILES = sorted((REPO_ROOT / "config" / "engine").glob("*.yaml"))


@pytest.fixture(scope="module")
def pinned_flags() -> frozenset[str]:
    """Every option sglang-kt 0.7.2's argument parser defines (read from the wheel's source)."""
    source = sglang_kt_root() / "sglang" / "srt" / "server_args.py"
    flags = accepted_flags(source.read_text(encoding="utf-8"))
    assert "--kt-cpuinfer" in flags  # the wheel is the KTransformers fork
    return flags


@pytest.mark.parametrize("profile_path", PROFILES, ids=[p.stem for p in PROFILES])
@pytest.mark.parametrize("host", [REFERENCE, AMX, SMALLER_GPU])
def test_every_emitted_flag_exists_in_the_pinned_sglang(
    profile_path: Path, host: str, pinned_flags: frozenset[str], tmp_path: Path
) -> None:
    plan = build_plan(
        load_profile(profile_path),
        probe(host_sources(host, tmp_path)),
        python="python3",
        environ={},
        prefix_cache_available=True,
    )
    checked = reconcile(plan.argv, pinned_flags)
    assert checked.unknown == ()
    assert checked.renamed == ()
    assert checked.argv == plan.argv


def test_upstream_renames_are_mapped() -> None:
    upstream_help = """
      --mamba-radix-cache-strategy {auto,no_buffer,extra_buffer}
      --dsa-prefill-backend DSA_PREFILL_BACKEND
      --dsa-decode-backend DSA_DECODE_BACKEND
      --kt-method KT_METHOD
    """
    argv = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--mamba-scheduler-strategy",
        "extra_buffer",
        "--nsa-prefill-backend=trtllm",
        "--nsa-decode-backend",
        "trtllm",
        "--kt-method",
        "FP8",
        "--no-such-flag",
    ]
    checked = reconcile(argv, accepted_flags(upstream_help))
    assert checked.argv == (
        "python3",
        "-m",
        "sglang.launch_server",
        "--mamba-radix-cache-strategy",
        "extra_buffer",
        "--dsa-prefill-backend=trtllm",
        "--dsa-decode-backend",
        "trtllm",
        "--kt-method",
        "FP8",
        "--no-such-flag",
    )
    assert ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy") in checked.renamed
    assert checked.unknown == ("--no-such-flag",)


def test_unknown_flags_become_problems_and_missing_sglang_a_note(tmp_path: Path) -> None:
    plan = build_plan(
        load_profile(REPO_ROOT / "config" / "engine" / "rtx-pro-6000-epyc.yaml"),
        probe(host_sources(REFERENCE, tmp_path)),
        python="python3",
        environ={},
        prefix_cache_available=False,
    )
    assert plan.problems == ()
    narrow = check_flags(plan, "python3", lambda _python: "--model-path --port")
    assert "installed SGLang has no flag --kt-method" in narrow.problems
    absent = check_flags(plan, "python3", lambda _python: None)
    assert absent.problems == ()
    assert absent.argv == plan.argv
    assert any("flag names not checked" in n for n in absent.notes)
