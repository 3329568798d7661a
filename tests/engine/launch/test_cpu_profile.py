"""The CPU test profiles (make engine-cpu): what the launcher makes of them on a GPU-less host,
and the runner that builds the engine's virtualenv from the image's own pins."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine.launch.__main__ import apply_overrides, main
from engine.launch.host import probe
from engine.launch.plan import build_plan
from engine.launch.profile import ProfileError, load_profile
from scripts.engine_cpu import __main__ as runner
from tests.engine.fixtures.hosts import NO_GPU, host_sources

REPO = Path(__file__).resolve().parents[3]
PROFILES = {
    "hybrid": REPO / "config" / "engine" / "cpu-tiny-hybrid.yaml",
    "dense": REPO / "config" / "engine" / "cpu-tiny-dense.yaml",
}


def _flag(argv: tuple[str, ...], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("kind", sorted(PROFILES))
def test_a_cpu_profile_plans_the_cpu_engine_with_no_gpu_and_no_kt(
    kind: str, tmp_path: Path
) -> None:
    profile = load_profile(PROFILES[kind])
    host = probe(host_sources(NO_GPU, tmp_path))
    plan = build_plan(profile, host, python="py", environ={}, prefix_cache_available=True)
    assert plan.problems == ()
    argv = plan.argv
    assert _flag(argv, "--device") == "cpu"
    assert _flag(argv, "--load-format") == "dummy"
    assert _flag(argv, "--max-total-tokens") == "65536"
    assert "--enable-metrics" in argv
    # Nothing of the GPU appliance: no kt-kernel, no CUDA graphs, no KV dtype, no images.
    assert not [a for a in argv if a.startswith(("--kt-", "--cuda-graph", "--kv-cache"))]
    assert "--mm-process-config" not in argv
    env = plan.env
    assert env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert env["TORCHDYNAMO_DISABLE"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1"
    # The recorded host reports no CPU affinity: every CPU (SGLang's own default spelling).
    assert env["SGLANG_CPU_OMP_THREADS_BIND"] == "all"
    # What the real server showed, for every profile (plan.py): forced shutdown, a /health
    # that does not queue a generation.
    assert env["SGL_FORCE_SHUTDOWN"] == "1"
    assert env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "0"
    hybrid = kind == "hybrid"
    assert (_flag(argv, "--mamba-scheduler-strategy") == "extra_buffer") is hybrid
    assert (_flag(argv, "--mamba-track-interval") == "256") is hybrid


def test_threads_bind_to_the_cpus_this_process_may_use(tmp_path: Path) -> None:
    profile = load_profile(PROFILES["dense"])
    host = dataclasses.replace(
        probe(host_sources(NO_GPU, tmp_path)), allowed_cpus=frozenset({0, 1, 2, 5, 7, 8})
    )
    plan = build_plan(profile, host, python="py", environ={}, prefix_cache_available=True)
    assert plan.env["SGLANG_CPU_OMP_THREADS_BIND"] == "0-2,5,7-8"


def test_the_appliance_profiles_also_get_what_the_real_server_showed(tmp_path: Path) -> None:
    profile = load_profile(REPO / "config" / "engine" / "rtx-pro-6000-epyc.yaml")
    host = probe(host_sources(NO_GPU, tmp_path))
    env = build_plan(profile, host, python="py", environ={}, prefix_cache_available=True).env
    assert env["SGL_FORCE_SHUTDOWN"] == "1"
    assert env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "0"


def test_port_and_model_path_override_the_profile(tmp_path: Path) -> None:
    profile = apply_overrides(load_profile(PROFILES["dense"]), 30123, str(tmp_path))
    assert profile.server.port == 30123
    assert profile.model.path == str(tmp_path)
    with pytest.raises(ProfileError):
        apply_overrides(profile, 70000, None)


def test_a_cpu_profile_needs_its_cpu_section(tmp_path: Path) -> None:
    text = PROFILES["dense"].read_text().split("\ncpu:\n")[0] + "\n"
    broken = tmp_path / "no-cpu.yaml"
    broken.write_text(text + "scheduling:\n  context_length: 1024\n")
    with pytest.raises(ProfileError, match="device cpu needs the cpu section"):
        load_profile(broken)


def test_the_dry_run_names_the_cpu_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["--profile", str(PROFILES["dense"]), "--dry-run", "--no-flag-check", "--port", "30999"]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "--device cpu" in out
    assert "--port 30999" in out


def test_the_engine_venv_is_pinned_as_the_image_pins_it() -> None:
    pins = runner.image_pins(REPO / "Dockerfile")
    dockerfile = (REPO / "Dockerfile").read_text()
    for pin in pins:
        name, version = pin.split("==")
        arg = dict(runner.PINNED_ARGS)[name]
        assert f"ARG {arg}={version}\n" in dockerfile
    assert [p.split("==")[0] for p in pins] == ["torch", "sglang-kt", "kt-kernel"]


def test_the_shims_come_first_and_never_ship_in_an_image() -> None:
    env = runner.launch_env({"PYTHONPATH": "/elsewhere"})
    parts = env["PYTHONPATH"].split(":")
    assert parts[0] == str(runner.SHIMS)
    assert parts[-1] == "/elsewhere"
    # The engine image copies engine/ and config/engine/ only; the shims live in scripts/.
    assert runner.SHIMS.is_relative_to(REPO / "scripts")
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "scripts" not in "".join(
        line for line in dockerfile.splitlines() if line.startswith("COPY")
    )
