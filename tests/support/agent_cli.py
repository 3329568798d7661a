"""The real Claude Code CLI, installed once from npm and run headless against a local server.

    claude = claude_code_or_skip()                  # pytest.skip when npm is missing or fails
    env = headless_env(tmp_path / "home", base_url, api_key="test-key")
    run = run_headless(claude, "Read notes.txt", env=env, cwd=workdir)
    assert run.returncode == 0 and run.result is not None

The pinned package goes into the repository's git-ignored `.cache/agent-cli/` on first use and
is reused afterwards. A headless run needs no prompts: `-p` skips the workspace-trust dialog,
`--permission-mode dontAsk` denies (and reports in `permission_denials`) every tool call that
would ask, while read-only tools such as Read inside the working directory still run
(`bypassPermissions` is refused when running as root, so it is no option for CI containers).
What else the CLI does in this setup is recorded in tests/fixtures/claude_code/README.md.
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

import pytest

from tests.support.procs import REPO_ROOT

CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
CLAUDE_CODE_VERSION = "2.1.332"
AGENT_CLI_CACHE = REPO_ROOT / ".cache" / "agent-cli"
# The served model; ids that start with "claude-" get Anthropic's context and output limits.
DEFAULT_MODEL = "glm-5.3-flash"
# One npm install downloads a ~400 MB native binary.
INSTALL_TIMEOUT_S = 600.0
_INSTALLED_STAMP = ".installed"


def _verify(executable: Path) -> str | None:
    """None when `claude --version` names the pinned version, else why not."""
    with tempfile.TemporaryDirectory(prefix="agent-cli-home-") as home:
        try:
            done = subprocess.run(
                [str(executable), "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                env={"PATH": os.environ.get("PATH", os.defpath), "HOME": home},
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{executable} --version failed: {exc}"
    if done.returncode != 0 or not done.stdout.startswith(CLAUDE_CODE_VERSION):
        output = (done.stdout + done.stderr)[:300]
        return f"{executable} --version: rc {done.returncode}, {output!r}"
    return None


def install_claude_code(cache_dir: Path = AGENT_CLI_CACHE) -> Path | str:
    """Path of the pinned `claude` executable, installed with npm on first use.

    Returns a reason to skip instead when npm is missing or the install fails, so that a
    machine without npm or the registry skips the tests that need the CLI, never fails them.
    Safe to call from several processes: each installs into its own staging folder and the
    first to finish renames it into place.
    """
    target = cache_dir / f"claude-code-{CLAUDE_CODE_VERSION}"
    executable = target / "node_modules" / ".bin" / "claude"
    if (target / _INSTALLED_STAMP).exists() and os.access(executable, os.X_OK):
        return executable
    npm = shutil.which("npm")
    if npm is None:
        return f"npm is not on PATH; it is needed to install {CLAUDE_CODE_PACKAGE}"
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
            "--loglevel=error",
            # An unreachable registry should give a skip reason soon, not after npm's backoff.
            "--fetch-retries=1",
            "--fetch-retry-maxtimeout=10000",
            f"{CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION}",
        ]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"npm install {CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION} failed: {exc}"
        if done.returncode != 0:
            lines = (done.stdout + done.stderr).strip().splitlines()
            said = " / ".join(line.strip() for line in lines[:4])
            return f"npm install {CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION} failed: {said}"
        problem = _verify(staging / "node_modules" / ".bin" / "claude")
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


def claude_code_or_skip() -> Path:
    """The `claude` executable, or pytest.skip with the reason it is unavailable."""
    found = install_claude_code()
    if isinstance(found, str):
        pytest.skip(found)
    return found


def headless_env(
    home: Path,
    base_url: str,
    api_key: str,
    *,
    model: str = DEFAULT_MODEL,
    max_output_tokens: int = 8192,
    max_context_tokens: int | None = None,
    hint_headers: bool = False,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment for a headless run against base_url, with `home` as a fresh HOME.

    Nothing is inherited but PATH: a developer's own ANTHROPIC_* variables or Claude login
    never leak into a test. The key goes out both as ANTHROPIC_AUTH_TOKEN (`Authorization:
    Bearer`) and ANTHROPIC_API_KEY (`x-api-key`); 2.1.332 sends both headers when both are set,
    with and without --bare. Writes the user settings and state files into `home`.
    """
    home.mkdir(parents=True, exist_ok=True)
    _write_json(home / ".claude" / "settings.json", {"skipWebFetchPreflight": True})
    _write_json(
        home / ".claude.json",
        {
            "hasCompletedOnboarding": True,
            "lastOnboardingVersion": CLAUDE_CODE_VERSION,
            # Interactive runs ask once before using an ANTHROPIC_API_KEY; this pre-approves it.
            "customApiKeyResponses": {"approved": [api_key[-20:]], "rejected": []},
        },
    )
    # The CLI keeps sockets and watcher probes under TMPDIR; keep them inside the throwaway HOME.
    tmp = home / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_AUTH_TOKEN": api_key,
        "ANTHROPIC_API_KEY": api_key,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "CLAUDE_CODE_SUBAGENT_MODEL": model,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(max_output_tokens),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    if max_context_tokens is not None:
        env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(max_context_tokens)
    if hint_headers:
        env["CLAUDE_CODE_GATEWAY_HINT_HEADERS"] = "1"
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class HeadlessRun:
    """One `claude -p` run: exit code (None when it was killed at the timeout) and output."""

    returncode: int | None
    result: dict[str, Any] | None
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def headless_argv(
    claude: Path,
    prompt: str,
    *,
    permission_mode: str = "dontAsk",
    max_turns: int = 4,
    bare: bool = False,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of a headless run that never waits for a person."""
    argv = [
        str(claude),
        "-p",
        prompt,
        "--output-format",
        "json",
        "--permission-mode",
        permission_mode,
        "--max-turns",
        str(max_turns),
        "--no-session-persistence",
    ]
    if bare:
        argv.append("--bare")
    return [*argv, *extra_args]


def run_headless(
    claude: Path,
    prompt: str,
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout: float = 120.0,
    permission_mode: str = "dontAsk",
    max_turns: int = 4,
    bare: bool = False,
    extra_args: Sequence[str] = (),
) -> HeadlessRun:
    """Run `claude -p PROMPT --output-format json ...` in cwd; kill its process group at timeout."""
    argv = headless_argv(
        claude,
        prompt,
        permission_mode=permission_mode,
        max_turns=max_turns,
        bare=bare,
        extra_args=extra_args,
    )
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    returncode: int | None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        returncode = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        returncode = None
    return HeadlessRun(returncode, _parse_result(stdout), stdout, stderr)


def _parse_result(stdout: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(stdout)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _write_json(path: Path, payload: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
