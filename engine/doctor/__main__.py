"""`python -m engine.doctor [--profile FILE] [--model-dir DIR]`: is this host ready?"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.doctor import hardware, workload
from engine.doctor.hardware import Space
from engine.doctor.model_dir import ModelDir, inspect_model_dir
from engine.doctor.report import Check, failed, render_table, summary
from engine.launch.host import HostFacts, HostSources, probe
from engine.launch.plan import build_plan
from engine.launch.prefix_cache import change_available
from engine.launch.profile import EngineProfile, ProfileError, load_profile

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PROFILE = REPO_ROOT / "config" / "engine" / "rtx-pro-6000-epyc.yaml"
PROFILE_ENV = "FLASHBOX_ENGINE_PROFILE"
MODEL_DIR_ENV = "FLASHBOX_MODEL_DIR"
# Docker keeps images and volumes here; elsewhere the working directory stands in.
DOCKER_DATA = Path("/var/lib/docker")
SHM = Path("/dev/shm")

SpaceReader = Callable[[Path], Space | None]


def disk_space(path: Path) -> Space | None:
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return Space(free_bytes=usage.free, total_bytes=usage.total)


@dataclass(frozen=True)
class Inputs:
    """Everything the checks read, gathered once (so tests can supply it)."""

    profile: EngineProfile
    host: HostFacts
    model: ModelDir | None
    model_missing: str
    shm: Space | None
    disk_path: Path
    disk: Space | None
    prefix_cache_available: bool


def run_checks(inputs: Inputs) -> list[Check]:
    p, h = inputs.profile, inputs.host
    plan = build_plan(
        p,
        h,
        python="python",
        environ={},
        prefix_cache_available=inputs.prefix_cache_available,
    )
    weights_gb = inputs.model.weights_gb if inputs.model and inputs.model.weight_files else None
    return [
        hardware.gpu(p, h),
        hardware.compute_capability(p, h),
        hardware.driver(p, h),
        hardware.cpu_isa(p, h),
        hardware.cores(p, h),
        hardware.numa(p, h),
        hardware.ram(p, h, weights_gb),
        hardware.shm(p, inputs.shm),
        hardware.disk(p, inputs.disk_path, inputs.disk),
        workload.model_dir(p, inputs.model, inputs.model_missing),
        workload.state_pool(p, h, inputs.prefix_cache_available),
        workload.profile_fit(p, plan),
    ]


def report(inputs: Inputs, profile_path: Path) -> tuple[str, bool]:
    checks = run_checks(inputs)
    head = [f"flashbox doctor: engine profile {inputs.profile.name} ({profile_path})"]
    if not inputs.host.gpus:
        head.append("No NVIDIA GPU found: this host cannot run the engine.")
    text = "\n".join(head) + "\n\n" + render_table(checks) + "\n" + summary(checks) + "\n"
    return text, failed(checks)


def _model_dir(
    arg: Path | None, profile: EngineProfile, environ: Mapping[str, str]
) -> tuple[ModelDir | None, str]:
    if arg is not None:
        return inspect_model_dir(arg), ""
    from_env = environ.get(MODEL_DIR_ENV)
    if from_env:
        return inspect_model_dir(Path(from_env)), ""
    in_profile = Path(profile.model.path)
    if in_profile.is_dir():
        return inspect_model_dir(in_profile), ""
    return None, f"not checked ({in_profile} does not exist here, {MODEL_DIR_ENV} unset)"


def main(
    argv: Sequence[str] | None = None,
    *,
    sources: HostSources | None = None,
    environ: Mapping[str, str] | None = None,
    space: SpaceReader = disk_space,
) -> int:
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="python -m engine.doctor", description="Check that this host can run the engine."
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=Path(env.get(PROFILE_ENV) or DEFAULT_PROFILE),
        help=f"engine profile YAML (default: ${PROFILE_ENV} or {DEFAULT_PROFILE.name})",
    )
    parser.add_argument("--model-dir", type=Path, help=f"model checkpoint (or ${MODEL_DIR_ENV})")
    args = parser.parse_args(argv)
    try:
        profile = load_profile(args.profile)
    except ProfileError as exc:
        print(exc, file=sys.stderr)
        return 2
    if profile.device != "cuda":
        # The CPU test profiles run a tiny model for tests (make engine-cpu), not the appliance.
        print(
            f"{args.profile}: a {profile.device} test profile; the doctor checks GPU hosts. "
            "`make engine-cpu` prepares and starts this one.",
            file=sys.stderr,
        )
        return 2
    model, missing = _model_dir(args.model_dir, profile, env)
    disk_path = DOCKER_DATA if DOCKER_DATA.is_dir() else Path.cwd()
    inputs = Inputs(
        profile=profile,
        host=probe(sources or HostSources()),
        model=model,
        model_missing=missing,
        shm=space(SHM),
        disk_path=disk_path,
        disk=space(disk_path),
        prefix_cache_available=change_available(env),
    )
    text, bad = report(inputs, args.profile)
    sys.stdout.write(text)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
