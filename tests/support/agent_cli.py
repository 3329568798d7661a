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
The installer and the process runner are shared with the Codex CLI (tests/support/npm_cli.py,
tests/support/codex_cli.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.npm_cli import AGENT_CLI_CACHE, NpmCli, install_npm_cli, run_cli
from tests.support.npm_cli import INSTALL_TIMEOUT_S as INSTALL_TIMEOUT_S

CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
CLAUDE_CODE_VERSION = "2.1.332"
# The served model; ids that start with "claude-" get Anthropic's context and output limits.
DEFAULT_MODEL = "glm-5.3-flash"


CLAUDE_CODE = NpmCli(
    CLAUDE_CODE_PACKAGE,
    CLAUDE_CODE_VERSION,
    executable="claude",
    folder=f"claude-code-{CLAUDE_CODE_VERSION}",
    version_output=CLAUDE_CODE_VERSION,
)


def install_claude_code(cache_dir: Path = AGENT_CLI_CACHE) -> Path | str:
    """Path of the pinned `claude` executable, or why it cannot be installed."""
    return install_npm_cli(CLAUDE_CODE, cache_dir)


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
    returncode, stdout, stderr = run_cli(argv, env=env, cwd=cwd, timeout=timeout)
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
