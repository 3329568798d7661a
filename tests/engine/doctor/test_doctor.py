"""The doctor on recorded hosts: /proc/cpuinfo, nvidia-smi and /proc/meminfo fixtures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.doctor.__main__ import main
from engine.doctor.hardware import Space
from tests.engine.fixtures.hosts import AMX, HOPPER, NO_GPU, REFERENCE, SMALLER_GPU, host_sources
from tests.support.procs import REPO_ROOT

REFERENCE_PROFILE = REPO_ROOT / "config" / "engine" / "rtx-pro-6000-epyc.yaml"
GIB = 2**30


def plenty(_path: Path) -> Space:
    return Space(free_bytes=600 * GIB, total_bytes=800 * GIB)


def make_model_dir(root: Path, *, architecture: str = "Glm5NextForConditionalGeneration") -> Path:
    model = root / "model"
    model.mkdir()
    config = {"architectures": [architecture], "quantization_config": {"quant_method": "fp8"}}
    (model / "config.json").write_text(json.dumps(config))
    (model / "chat_template.jinja").write_text("{{ messages }}")
    for i in range(3):
        (model / f"model-0000{i}-of-00003.safetensors").write_bytes(b"\0" * 1024)
    return model


def run_doctor(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    host: str,
    *args: str,
    numa: bool = True,
    environ: dict[str, str] | None = None,
) -> tuple[int, str]:
    rc = main(
        ["--profile", str(REFERENCE_PROFILE), *args],
        sources=host_sources(host, tmp_path, numa=numa),
        environ=environ if environ is not None else {"FLASHBOX_PREFIX_CACHE_AVAILABLE": "1"},
        space=plenty,
    )
    return rc, capsys.readouterr().out


def row(out: str, name: str) -> str:
    """The table line of one check."""
    return next(line for line in out.splitlines() if line.startswith(name + " "))


def test_reference_host_passes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = make_model_dir(tmp_path)
    rc, out = run_doctor(capsys, tmp_path, REFERENCE, "--model-dir", str(model))
    assert rc == 0, out
    assert "FAIL" not in out
    assert "RTX PRO 6000 Blackwell" in row(out, "GPU")
    assert "12.0 (sm_120): supported, KV cache fp8_e4m3" in row(out, "compute capability")
    assert "supports CUDA 13.2" in row(out, "driver / CUDA")
    assert "AVX512-BF16 yes, AMX no -> kt-kernel avx512_bf16" in row(out, "CPU ISA")
    assert "256 (512 logical CPUs, 2 socket(s)) -> --kt-cpuinfer 254" in row(out, "physical cores")
    assert "2 node(s) (0, 1) -> 2 threadpool(s)" in row(out, "NUMA")
    assert "1623 GB total" in row(out, "RAM")
    assert "needs 350 GB" in row(out, "RAM")
    assert "Glm5NextForConditionalGeneration, 3 weight files" in row(out, "model directory")
    pool = row(out, "prefix cache")
    assert "192 slots x 140 MiB = 26.2 GiB GPU (TP1)" in pool
    assert "at most 38 running requests" in pool
    assert "rtx-pro-6000-epyc fits this host" in row(out, "profile")
    assert "All checks passed" in out


def test_no_gpu_says_so_and_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out = run_doctor(capsys, tmp_path, NO_GPU)
    assert rc == 1
    assert "No NVIDIA GPU found: this host cannot run the engine." in out
    assert row(out, "GPU").split()[1] == "FAIL"
    assert "docker compose --profile sim up" in out  # the way forward without a GPU
    assert row(out, "compute capability").split()[2] == "skip"
    # 24 GB of RAM cannot hold the experts: the failure says why.
    assert row(out, "RAM").split()[1] == "FAIL"
    assert "cannot hold the model" in out


def test_hopper_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out = run_doctor(capsys, tmp_path, HOPPER)
    assert rc == 1
    line = row(out, "compute capability")
    assert "FAIL" in line
    assert "9.0 (sm_90)" in line
    assert "8.6-8.6, 8.9-8.9, 10.0 or newer" in out


def test_smaller_gpu_pool_does_not_fit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out = run_doctor(capsys, tmp_path, SMALLER_GPU)
    assert rc == 1
    pool = row(out, "prefix cache")
    assert "FAIL" in pool
    assert "20.7 GiB static budget" in pool
    assert "Lower prefix_cache.slots" in out


def test_amx_host_and_missing_numa(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out = run_doctor(capsys, tmp_path, AMX, numa=False)
    assert "AMX yes -> kt-kernel amx" in row(out, "CPU ISA")
    assert row(out, "NUMA").split()[1] == "warn"
    assert "set kt.numa_nodes" in out
    assert row(out, "model directory").split()[2] == "skip"
    assert rc == 0, out  # warnings and skips do not fail the host


def test_stock_image_warns_about_the_prefix_cache(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, out = run_doctor(
        capsys, tmp_path, REFERENCE, environ={"FLASHBOX_PREFIX_CACHE_AVAILABLE": "0"}
    )
    line = row(out, "prefix cache")
    assert "warn" in line
    assert "is not in this install" in line


def test_wrong_checkpoint_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = make_model_dir(tmp_path, architecture="LlamaForCausalLM")
    rc, out = run_doctor(capsys, tmp_path, REFERENCE, "--model-dir", str(model))
    assert rc == 1
    assert "architectures LlamaForCausalLM" in row(out, "model directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out = run_doctor(capsys, tmp_path / "b", REFERENCE, "--model-dir", str(empty))
    assert rc == 1
    assert "no config.json" in row(out, "model directory")


def test_command_line_on_this_machine() -> None:
    """Runs for real here (no GPU on CI machines): a table, and a non-zero exit without a GPU."""
    done = subprocess.run(
        [sys.executable, "-m", "engine.doctor"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "CHECK" in done.stdout
    assert "RESULT" in done.stdout
    if "No NVIDIA GPU found" in done.stdout:
        assert done.returncode == 1
