"""The launcher's command line: dry run, refusal, exec, and the image's patch loader (.pth)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.launch.__main__ import main
from tests.engine.fixtures.hosts import NO_GPU, REFERENCE, host_sources
from tests.support.procs import REPO_ROOT

REFERENCE_PROFILE = REPO_ROOT / "config" / "engine" / "rtx-pro-6000-epyc.yaml"
PTH = REPO_ROOT / "engine" / "launch" / "flashbox_engine_patches.pth"


class Exec:
    """Stands in for os.execvpe and records what would have replaced the process."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], dict[str, str]]] = []

    def __call__(self, file: str, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self.calls.append((file, list(argv), dict(env)))


def _profile_with_model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data: dict[str, Any] = yaml.safe_load(REFERENCE_PROFILE.read_text())
    data["model"]["path"] = str(model)
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_dry_run_from_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "engine.launch", "--profile", str(REFERENCE_PROFILE), "--dry-run"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "-m sglang.launch_server" in done.stdout
    assert "--kt-method FP8" in done.stdout


def test_invalid_profile_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    assert main(["--profile", str(bad), "--dry-run"]) == 2
    assert "model: Field required" in capsys.readouterr().err


def test_execs_sglang_with_the_plan(tmp_path: Path) -> None:
    execute = Exec()
    rc = main(
        ["--profile", str(_profile_with_model(tmp_path)), "--python", "python3"],
        sources=host_sources(REFERENCE, tmp_path),
        environ={"PATH": "/usr/bin", "FLASHBOX_PREFIX_CACHE_AVAILABLE": "1"},
        read_help=lambda _python: None,
        execute=execute,
    )
    assert rc == 0
    [(file, argv, env)] = execute.calls
    assert file == "python3"
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--max-mamba-cache-size" in argv
    assert env["PATH"] == "/usr/bin"  # the rest of the environment is inherited
    assert env["FLASHBOX_PREFIX_CACHE"] == "1"
    assert env["KT_KERNEL_CPU_VARIANT"] == "avx512_bf16"


def test_refuses_to_start_on_a_host_without_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    execute = Exec()
    rc = main(
        ["--profile", str(REFERENCE_PROFILE)],
        sources=host_sources(NO_GPU, tmp_path),
        environ={},
        read_help=lambda _python: None,
        execute=execute,
    )
    assert rc == 1
    assert execute.calls == []
    err = capsys.readouterr().err
    assert "cannot start: no NVIDIA GPU found" in err
    assert "config.json not found" in err


def _site_run(tmp_path: Path, autoload: str | None) -> subprocess.CompletedProcess[str]:
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / PTH.name).write_text(PTH.read_text())
    code_root = tmp_path / "code"
    if autoload is not None:
        patches = code_root / "engine" / "patches"
        patches.mkdir(parents=True)
        (code_root / "engine" / "__init__.py").write_text("")
        (patches / "__init__.py").write_text("")
        (patches / "autoload.py").write_text(autoload)
    script = (
        "import site, sys\n"
        f"sys.path.insert(0, {str(code_root)!r})\n"
        f"site.addsitedir({str(site_dir)!r})\n"
        "print('started')\n"
    )
    return subprocess.run(
        [sys.executable, "-S", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_pth_loads_the_patches(tmp_path: Path) -> None:
    done = _site_run(tmp_path, "print('patches loaded')\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["patches loaded", "started"]


def test_pth_survives_missing_patches(tmp_path: Path) -> None:
    done = _site_run(tmp_path, None)
    assert done.returncode == 0
    assert done.stdout.strip() == "started"
    assert "engine patches not loaded" in done.stderr
