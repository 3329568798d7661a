"""`python -m engine.launch --profile FILE [--dry-run]`: print or exec the engine command."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from engine.launch.flags import accepted_flags, reconcile, sglang_help
from engine.launch.host import HostFacts, HostSources, probe
from engine.launch.plan import LaunchPlan, build_plan
from engine.launch.prefix_cache import change_available
from engine.launch.profile import EngineProfile, ProfileError, load_profile
from engine.launch.render import render_plan

Executor = Callable[[str, list[str], dict[str, str]], object]
HelpReader = Callable[[str], str | None]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine.launch",
        description="Start SGLang + KTransformers from an engine profile, sized to this host.",
    )
    parser.add_argument("--profile", required=True, type=Path, help="engine profile YAML")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the command and environment, run nothing"
    )
    parser.add_argument(
        "--no-flag-check",
        action="store_true",
        help="skip checking flag names against the installed SGLang's --help",
    )
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter that runs SGLang (default: this one)"
    )
    parser.add_argument("--port", type=int, help="serve on this port (overrides server.port)")
    parser.add_argument(
        "--model-path", help="model directory (overrides model.path; make engine-cpu uses it)"
    )
    return parser


def apply_overrides(
    profile: EngineProfile, port: int | None, model_path: str | None
) -> EngineProfile:
    """The profile with the command line's --port and --model-path in place of its own."""
    if port is not None:
        if not 1 <= port <= 65535:
            raise ProfileError(f"--port {port} is not a TCP port")
        profile = profile.model_copy(
            update={"server": profile.server.model_copy(update={"port": port})}
        )
    if model_path is not None:
        profile = profile.model_copy(
            update={"model": profile.model.model_copy(update={"path": model_path})}
        )
    return profile


def check_flags(plan: LaunchPlan, python: str, read_help: HelpReader) -> LaunchPlan:
    """Rename or reject flags the installed SGLang does not know."""
    text = read_help(python)
    if text is None:
        note = "no SGLang --help here (not installed, or it failed): flag names not checked"
        return dataclasses.replace(plan, notes=(*plan.notes, note))
    checked = reconcile(plan.argv, accepted_flags(text))
    notes = [f"installed SGLang calls {old} {new}" for old, new in checked.renamed]
    problems = [f"installed SGLang has no flag {flag}" for flag in checked.unknown]
    return dataclasses.replace(
        plan,
        argv=checked.argv,
        notes=(*plan.notes, *notes),
        problems=(*plan.problems, *problems),
    )


def _model_dir_problems(profile: EngineProfile) -> list[str]:
    config = Path(profile.model.path) / "config.json"
    if config.is_file():
        return []
    return [
        f"{config} not found: mount the model directory there "
        "(FLASHBOX_MODEL_DIR in .env for docker compose)"
    ]


def main(
    argv: Sequence[str] | None = None,
    *,
    sources: HostSources | None = None,
    environ: Mapping[str, str] | None = None,
    read_help: HelpReader = sglang_help,
    execute: Executor = os.execvpe,
) -> int:
    args = _parser().parse_args(argv)
    env_in = os.environ if environ is None else environ
    try:
        profile = apply_overrides(load_profile(args.profile), args.port, args.model_path)
    except ProfileError as exc:
        print(exc, file=sys.stderr)
        return 2
    host: HostFacts = probe(sources or HostSources())
    plan = build_plan(
        profile,
        host,
        python=args.python,
        environ=env_in,
        prefix_cache_available=change_available(env_in),
    )
    if profile.check_flags and not args.no_flag_check:
        plan = check_flags(plan, args.python, read_help)
    if args.dry_run:
        sys.stdout.write(render_plan(plan, profile_name=profile.name, host=host))
        return 0
    problems = [*plan.problems, *_model_dir_problems(profile)]
    for note in plan.notes:
        print(f"engine.launch: {note}", file=sys.stderr)
    if problems:
        for problem in problems:
            print(f"engine.launch: cannot start: {problem}", file=sys.stderr)
        print("engine.launch: run `python -m engine.doctor` for a full check", file=sys.stderr)
        return 1
    sys.stderr.flush()
    sys.stdout.flush()
    # exec, not a child process: SGLang becomes this process and receives the signals.
    execute(plan.argv[0], list(plan.argv), {**env_in, **plan.env})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
