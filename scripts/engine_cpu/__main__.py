"""`make engine-cpu`: the real sglang-kt server on this CPU with a tiny model, in the foreground.

    python -m scripts.engine_cpu [--model hybrid|dense] [--port N] [--prepare-only]

Environment: ENGINE_CPU_MODEL (hybrid, the default, or dense), ENGINE_CPU_PORT (30000).

On first use it builds a virtualenv under .cache/engine-cpu/ with sglang-kt pinned exactly as
the engine image pins it (the Dockerfile's ARGs are read, not repeated), and never touches the
test virtualenv: that one must stay free of CUDA torch. Later runs reuse it. Then it makes
the tiny model (scripts/engine_cpu/tiny_model.py) and execs the project's launcher
(`python -m engine.launch`) with the CPU test profile, the engine patches loaded the way the
image loads them (.pth files), and the test-only shims (scripts/engine_cpu/shims) first on
PYTHONPATH.

Stdlib only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE = REPO_ROOT / ".cache" / "engine-cpu"
VENV = CACHE / "venv"
SHIMS = Path(__file__).resolve().parent / "shims"
PROFILES = {
    "hybrid": REPO_ROOT / "config" / "engine" / "cpu-tiny-hybrid.yaml",
    "dense": REPO_ROOT / "config" / "engine" / "cpu-tiny-dense.yaml",
}
# The image's pins, by Dockerfile ARG name, in install order.
PINNED_ARGS = (
    ("torch", "TORCH_VERSION"),
    ("sglang-kt", "SGLANG_KT_VERSION"),
    ("kt-kernel", "KT_KERNEL_VERSION"),
)
INSTALL_STAMP = ".flashbox-installed"
# sglang-kt's extras the engine image installs with it: `tracing` (the OpenTelemetry SDK and
# its OTLP exporters; with --enable-trace and them missing, the server fails at start).
# Installed over an existing venv with a stamp of their own, so adding one rebuilds nothing.
ENGINE_EXTRAS = ("tracing",)
EXTRAS_STAMP = ".flashbox-extras"


def image_pins(dockerfile: Path = REPO_ROOT / "Dockerfile") -> list[str]:
    """`name==version` for each package the engine image pins, read from its ARG lines."""
    text = dockerfile.read_text(encoding="utf-8")
    pins = []
    for package, arg in PINNED_ARGS:
        match = re.search(rf"^ARG {arg}=(\S+)$", text, re.MULTILINE)
        if match is None:
            raise SystemExit(f"Dockerfile has no `ARG {arg}=...` line: cannot pin {package}")
        pins.append(f"{package}=={match.group(1)}")
    return pins


def venv_python(venv: Path = VENV) -> Path:
    return venv / "bin" / "python"


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def ensure_venv(venv: Path = VENV) -> Path:
    """The engine virtualenv with the image's pins; built once (~5 min, ~10 GB), then reused."""
    pins = image_pins()
    stamp = venv / INSTALL_STAMP
    wanted = "\n".join(pins) + "\n"
    python = venv_python(venv)
    if not (stamp.is_file() and stamp.read_text() == wanted and python.exists()):
        print(f"engine-cpu: building {venv} with {' '.join(pins)} (first use: ~5 min, ~10 GB)")
        if venv.exists():
            shutil.rmtree(venv)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        # From the wheels make test-docker's engine image installs (.cache/engine-wheels, made
        # once from PyPI by whichever suite comes first): the ~5 GB are downloaded once.
        from scripts.docker_stack.engine_image import ensure_wheelhouse

        wheels = ensure_wheelhouse(sys.executable)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "--no-index", "--find-links", str(wheels), *pins],
            check=True,
        )  # fmt: skip
        stamp.write_text(wanted)
    _install_extras(venv, python, pins)
    _install_path_files(python)
    return python


def extras_requirement(pins: list[str]) -> str:
    """`sglang-kt[tracing]==VERSION`: the image's sglang-kt pin with its extras."""
    sglang = next(pin for pin in pins if pin.startswith("sglang-kt=="))
    return sglang.replace("sglang-kt", f"sglang-kt[{','.join(ENGINE_EXTRAS)}]", 1)


def _install_extras(venv: Path, python: Path, pins: list[str]) -> None:
    requirement = extras_requirement(pins)
    stamp = venv / EXTRAS_STAMP
    if stamp.is_file() and stamp.read_text() == requirement + "\n":
        return
    print(f"engine-cpu: installing {requirement}")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", requirement],
        check=True,
    )
    stamp.write_text(requirement + "\n")


def _install_path_files(python: Path) -> None:
    """What the engine image does: the project on the path, the patches loaded at start-up."""
    site = _site_packages(python)
    (site / "flashbox.pth").write_text(f"{REPO_ROOT}\n")
    shutil.copyfile(
        REPO_ROOT / "engine" / "launch" / "flashbox_engine_patches.pth",
        site / "flashbox_engine_patches.pth",
    )


def make_model(python: Path, kind: str) -> Path:
    out = CACHE / "models" / kind
    subprocess.run(
        [str(python), "-m", "scripts.engine_cpu.tiny_model", "--kind", kind, "--out", str(out)],
        check=True,
        cwd=REPO_ROOT,
    )
    return out


def launch_command(python: Path, kind: str, port: int, model: Path) -> list[str]:
    return [
        str(python),
        "-m",
        "engine.launch",
        "--profile",
        str(PROFILES[kind]),
        "--port",
        str(port),
        "--model-path",
        str(model),
    ]


def launch_env(base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    # The shims come first so their sgl_kernel is found before anything installed.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(SHIMS), str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
    )
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.engine_cpu", description=__doc__)
    parser.add_argument(
        "--model", choices=sorted(PROFILES), default=os.environ.get("ENGINE_CPU_MODEL", "hybrid")
    )
    parser.add_argument("--port", type=int, default=int(os.environ.get("ENGINE_CPU_PORT", "30000")))
    parser.add_argument(
        "--prepare-only", action="store_true", help="build the venv and the model, serve nothing"
    )
    args = parser.parse_args(argv)
    python = ensure_venv()
    model = make_model(python, args.model)
    if args.prepare_only:
        print(f"engine-cpu: ready: {python} serves {model}")
        return 0
    command = launch_command(python, args.model, args.port, model)
    print(f"engine-cpu: {' '.join(command)}", flush=True)
    os.chdir(REPO_ROOT)
    os.execve(command[0], command, launch_env())
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
