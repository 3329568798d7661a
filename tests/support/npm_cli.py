"""Agent CLIs from npm: a pinned install into `.cache/agent-cli/`, and a killable headless run.

    found = install_npm_cli(CLI)         # the executable, or a reason to skip
    returncode, stdout, stderr = run_cli(argv, env=env, cwd=workdir, timeout=120)

tests/support/agent_cli.py (Claude Code) and tests/support/codex_cli.py (Codex) build on these.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.procs import REPO_ROOT

AGENT_CLI_CACHE = REPO_ROOT / ".cache" / "agent-cli"
# One npm install downloads a ~400 MB native binary.
INSTALL_TIMEOUT_S = 600.0
_INSTALLED_STAMP = ".installed"


@dataclass(frozen=True)
class NpmCli:
    """An agent CLI published on npm, pinned to one version."""

    package: str
    version: str
    executable: str  # its name under node_modules/.bin
    folder: str  # its install folder under the cache
    version_output: str  # what `<executable> --version` prints first

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"


def _verify(cli: NpmCli, executable: Path) -> str | None:
    """None when `--version` names the pinned version, else why not."""
    with tempfile.TemporaryDirectory(prefix="agent-cli-home-") as home:
        try:
            done = subprocess.run(
                [str(executable), "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                env={"PATH": os.environ.get("PATH", os.defpath), "HOME": home, "TMPDIR": home},
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{executable} --version failed: {exc}"
    if done.returncode != 0 or not done.stdout.startswith(cli.version_output):
        output = (done.stdout + done.stderr)[:300]
        return f"{executable} --version: rc {done.returncode}, {output!r}"
    return None


def install_npm_cli(cli: NpmCli, cache_dir: Path = AGENT_CLI_CACHE) -> Path | str:
    """Path of the pinned CLI's executable, installed with npm on first use.

    Returns a reason to skip instead when npm is missing or the install fails, so that a
    machine without npm or the registry skips the tests that need the CLI, never fails them.
    Safe to call from several processes: each installs into its own staging folder and the
    first to finish renames it into place. Both CLIs ship their native binary as an optional
    dependency for the platform, so a user's `omit=optional` npm setting is overridden, and
    `--version` (which runs that binary) proves it came along.
    """
    target = cache_dir / cli.folder
    executable = target / "node_modules" / ".bin" / cli.executable
    if (target / _INSTALLED_STAMP).exists() and os.access(executable, os.X_OK):
        return executable
    npm = shutil.which("npm")
    if npm is None:
        return f"npm is not on PATH; it is needed to install {cli.package}"
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{target.name}-staging-", dir=cache_dir))
    try:
        argv = [
            npm,
            "install",
            "--prefix",
            str(staging),
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--include=optional",
            "--loglevel=error",
            # An unreachable registry should give a skip reason soon, not after npm's backoff.
            "--fetch-retries=1",
            "--fetch-retry-maxtimeout=10000",
            cli.spec,
        ]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"npm install {cli.spec} failed: {exc}"
        if done.returncode != 0:
            lines = (done.stdout + done.stderr).strip().splitlines()
            said = " / ".join(line.strip() for line in lines[:4])
            return f"npm install {cli.spec} failed: {said}"
        problem = _verify(cli, staging / "node_modules" / ".bin" / cli.executable)
        if problem is not None:
            return problem
        (staging / _INSTALLED_STAMP).touch()
        staging.chmod(0o755)  # mkdtemp made it private; the install is not secret
        with contextlib.suppress(OSError):  # another process won the race: use its copy
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not os.access(executable, os.X_OK):
        return f"{executable} is missing after the install"
    return executable


def run_cli(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, timeout: float
) -> tuple[int | None, str, str]:
    """Run argv with no stdin in its own process group, killed whole at the timeout.

    Returns the exit code (None when it was killed), stdout and stderr.
    """
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return None, stdout, stderr
    return proc.returncode, stdout, stderr


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of a CLI's JSONL output, one a line; other lines are left out."""
    events = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events
