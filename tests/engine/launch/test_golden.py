"""Golden tests: engine profile + recorded host -> SGLang argv and environment.

The golden files under golden/ are the dry-run text, reviewed by hand. After an intended change,
regenerate them with FLASHBOX_UPDATE_GOLDEN=1 and read the diff.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.launch.host import HostFacts, probe
from engine.launch.plan import LaunchPlan, build_plan
from engine.launch.profile import KernelsSection, load_profile
from engine.launch.render import render_plan
from tests.engine.fixtures.hosts import AMX, REFERENCE, SMALLER_GPU, host_sources
from tests.support.procs import REPO_ROOT

GOLDEN = Path(__file__).parent / "golden"
PROFILES = REPO_ROOT / "config" / "engine"
REFERENCE_PROFILE = PROFILES / "rtx-pro-6000-epyc.yaml"


@dataclass(frozen=True)
class Case:
    name: str
    host: str
    profile: Path
    numa: bool = True
    prefix_cache_available: bool = True


CASES = [
    Case("reference", REFERENCE, REFERENCE_PROFILE),
    Case("reference-stock-image", REFERENCE, REFERENCE_PROFILE, prefix_cache_available=False),
    Case("amx-host", AMX, REFERENCE_PROFILE),
    Case("smaller-gpu-reference-profile", SMALLER_GPU, REFERENCE_PROFILE),
    Case("smaller-gpu-example-profile", SMALLER_GPU, PROFILES / "rtx-5090-epyc.yaml"),
    Case("no-numa-info", REFERENCE, REFERENCE_PROFILE, numa=False),
]


def plan_for(case: Case, tmp_path: Path) -> tuple[LaunchPlan, HostFacts, str]:
    profile = load_profile(case.profile)
    host = probe(host_sources(case.host, tmp_path, numa=case.numa))
    plan = build_plan(
        profile,
        host,
        python="python3",
        environ={},
        prefix_cache_available=case.prefix_cache_available,
    )
    return plan, host, render_plan(plan, profile_name=profile.name, host=host)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_dry_run_matches_golden(case: Case, tmp_path: Path) -> None:
    _, _, text = plan_for(case, tmp_path)
    golden = GOLDEN / f"{case.name}.txt"
    if os.environ.get("FLASHBOX_UPDATE_GOLDEN") == "1":
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")


def _flag(plan: LaunchPlan, name: str) -> list[str] | None:
    """Values following `name` in argv (up to the next flag), None when absent."""
    argv = list(plan.argv)
    if name not in argv:
        return None
    values: list[str] = []
    for token in argv[argv.index(name) + 1 :]:
        if token.startswith("--"):
            break
        values.append(token)
    return values


def test_reference_host_carries_the_tuned_settings(tmp_path: Path) -> None:
    plan, _, _ = plan_for(CASES[0], tmp_path)
    assert plan.problems == ()
    assert plan.argv[:3] == ("python3", "-m", "sglang.launch_server")
    assert _flag(plan, "--kt-method") == ["FP8"]
    assert _flag(plan, "--kt-cpuinfer") == [
        "254"
    ]  # 2 x 128 cores, not 512 SMT threads, less the 2 reserved
    assert _flag(plan, "--kt-threadpool-count") == ["2"]
    assert _flag(plan, "--kt-numa-nodes") == ["0", "1"]
    assert _flag(plan, "--kt-num-gpu-experts") == ["0"]
    assert _flag(plan, "--kt-gpu-prefill-token-threshold") == ["2048"]
    assert _flag(plan, "--chunked-prefill-size") == ["16384"]
    assert _flag(plan, "--schedule-policy") == ["lpm"]
    assert _flag(plan, "--cuda-graph-bs") == ["1", "2", "4"]
    assert _flag(plan, "--kv-cache-dtype") == ["fp8_e4m3"]
    assert _flag(plan, "--attention-backend") == ["nsa"]
    assert _flag(plan, "--nsa-prefill-backend") == ["trtllm"]
    assert _flag(plan, "--nsa-decode-backend") == ["trtllm"]
    assert _flag(plan, "--tool-call-parser") == ["glm47"]
    assert _flag(plan, "--reasoning-parser") == ["glm45"]
    assert _flag(plan, "--enable-metrics") == []
    assert _flag(plan, "--enable-cache-report") == []
    assert _flag(plan, "--watchdog-timeout") == ["1800"]
    assert _flag(plan, "--mm-process-config") == ['{"image": {"max_pixels": 1254400}}']
    assert _flag(plan, "--limit-mm-data-per-request") == ['{"image": 8}']
    assert _flag(plan, "--mamba-scheduler-strategy") == ["extra_buffer"]
    assert _flag(plan, "--mamba-track-interval") == ["256"]
    assert _flag(plan, "--max-mamba-cache-size") == ["192"]
    assert plan.env["KT_KERNEL_CPU_VARIANT"] == "avx512_bf16"
    assert plan.env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0"
    assert plan.env["PYTORCH_ALLOC_CONF"] == "expandable_segments:True"
    assert plan.env["FLASHBOX_PREFIX_CACHE"] == "1"
    assert any("at most 38 running requests" in n for n in plan.notes)


def test_stock_image_never_gets_the_hybrid_state_flags(tmp_path: Path) -> None:
    plan, _, _ = plan_for(CASES[1], tmp_path)
    assert plan.problems == ()
    assert not any(t.startswith("--mamba") or t == "--max-mamba-cache-size" for t in plan.argv)
    assert plan.env["FLASHBOX_PREFIX_CACHE"] == "0"
    assert any("prefilled from scratch" in n for n in plan.notes)


def test_amx_host_uses_the_amx_kernels_but_keeps_fp8(tmp_path: Path) -> None:
    plan, _, _ = plan_for(CASES[2], tmp_path)
    assert plan.problems == ()
    assert plan.env["KT_KERNEL_CPU_VARIANT"] == "amx"
    assert _flag(plan, "--kt-method") == ["FP8"]
    assert _flag(plan, "--kt-cpuinfer") == ["110"]  # physical cores less the profile's 2 reserved


def test_smaller_gpu_refuses_the_reference_pool_and_sizes_its_own(tmp_path: Path) -> None:
    refused, _, _ = plan_for(CASES[3], tmp_path / "a")
    assert any("lower prefix_cache.slots" in p for p in refused.problems)
    sized, _, _ = plan_for(CASES[4], tmp_path / "b")
    assert sized.problems == ()
    # 32607 MiB x 0.65 static x 0.5 share / 140 MiB per slot
    assert _flag(sized, "--max-mamba-cache-size") == ["75"]
    assert _flag(sized, "--kt-cpuinfer") == ["96"]
    assert _flag(sized, "--kt-numa-nodes") == ["0"]


def test_host_without_numa_information_uses_one_pool_per_socket(tmp_path: Path) -> None:
    plan, _, _ = plan_for(CASES[5], tmp_path)
    assert plan.problems == ()
    assert _flag(plan, "--kt-threadpool-count") == ["2"]
    assert _flag(plan, "--kt-numa-nodes") is None
    assert any("no NUMA information" in n for n in plan.notes)


def test_kernel_switches_reach_the_engine_environment(tmp_path: Path) -> None:
    profile = load_profile(REFERENCE_PROFILE)
    host = probe(host_sources(REFERENCE, tmp_path))
    kernels = KernelsSection(enabled=True, disable=["gate_topk"], indexer_query_chunk=256)
    on = profile.model_copy(update={"kernels": kernels})
    env = build_plan(on, host, python="python3", environ={}, prefix_cache_available=True).env
    assert env["FLASHBOX_KERNELS"] == "1"
    assert env["FLASHBOX_KERNEL_GATE_TOPK"] == "0"
    assert env["FLASHBOX_INDEXER_QUERY_CHUNK"] == "256"
    off = build_plan(profile, host, python="python3", environ={}, prefix_cache_available=True).env
    assert off["FLASHBOX_KERNELS"] == "0"
    assert "FLASHBOX_INDEXER_QUERY_CHUNK" not in off
