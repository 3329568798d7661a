"""The real opencode CLI, installed once from npm and run headless against a local chat API.

    opencode = opencode_or_skip()                   # pytest.skip when npm is missing or fails
    env = opencode_env(tmp_path / "home", base_url + "/v1", api_key="test-key")
    run = run_opencode(opencode, "Read notes.txt", env=env, cwd=workdir)
    assert run.returncode == 0

`opencode-ai` is a launcher whose native binary comes in a per-platform optional dependency
(`opencode-linux-x64`, ...); the installer in tests/support/npm_cli.py forces optional
dependencies on and runs `opencode --version`, which fails without the binary.

`opencode_env()` writes a throwaway HOME whose `~/.config/opencode/opencode.json` defines one
OpenAI-compatible provider (`@ai-sdk/openai-compatible`, which the binary bundles) serving one
model, used for the agent turns and, as `small_model`, for the title; it turns off what would
reach other hosts (the models.dev catalogue fetch, the update check, default plugins fetched
from npm, LSP downloads, sharing) and the reading of Claude Code's files under HOME.
`run_opencode()` runs `opencode run --format json` with no stdin, in its own process group.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.npm_cli import AGENT_CLI_CACHE, NpmCli, install_npm_cli, json_lines, run_cli

OPENCODE_PACKAGE = "opencode-ai"
OPENCODE_VERSION = "1.18.33"
OPENCODE = NpmCli(
    OPENCODE_PACKAGE,
    OPENCODE_VERSION,
    executable="opencode",
    folder=f"opencode-{OPENCODE_VERSION}",
    version_output=OPENCODE_VERSION,
)
DEFAULT_MODEL = "glm-5.3-flash"
PROVIDER_ID = "flashbox"


def install_opencode(cache_dir: Path = AGENT_CLI_CACHE) -> Path | str:
    """Path of the pinned `opencode` executable, or why it cannot be installed."""
    return install_npm_cli(OPENCODE, cache_dir)


def opencode_or_skip() -> Path:
    """The `opencode` executable, or pytest.skip with the reason it is unavailable."""
    found = install_opencode()
    if isinstance(found, str):
        pytest.skip(found)
    return found


def opencode_config(
    base_url: str,
    api_key: str,
    *,
    model: str = DEFAULT_MODEL,
    context_tokens: int = 131072,
    output_tokens: int = 8192,
) -> dict[str, Any]:
    """The opencode.json of a headless run against base_url (the URL up to `/v1`).

    The model's `limit.context` is what opencode compacts against: a small one makes it
    compact after a few turns.
    """
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": PROVIDER_ID,
                "options": {"baseURL": base_url, "apiKey": api_key},
                "models": {
                    model: {
                        "name": model,
                        "tool_call": True,
                        "reasoning": True,
                        "limit": {"context": context_tokens, "output": output_tokens},
                    }
                },
            }
        },
        "model": f"{PROVIDER_ID}/{model}",
        "small_model": f"{PROVIDER_ID}/{model}",
        "autoupdate": False,
        "share": "disabled",
    }


def opencode_env(
    home: Path,
    base_url: str,
    api_key: str,
    *,
    config: Mapping[str, Any] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment for a headless run against base_url, with `home` as a fresh HOME.

    Nothing is inherited but PATH: a developer's own config, auth or sessions never leak in.
    Writes `config` (default: opencode_config(base_url, api_key)) as the user config; the
    XDG folders (config, data with the session database, cache, state) all lie under `home`,
    so a later run with the same `home` can continue a session.
    """
    folders = {
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_STATE_HOME": home / ".local" / "state",
    }
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    settings = config if config is not None else opencode_config(base_url, api_key)
    config_file = folders["XDG_CONFIG_HOME"] / "opencode" / "opencode.json"
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(json.dumps(settings, indent=2) + "\n")
    tmp = home / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        **{name: str(folder) for name, folder in folders.items()},
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    }
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class OpencodeRun:
    """One `opencode run --format json` run: exit code (None when killed), events, output."""

    returncode: int | None
    events: list[dict[str, Any]]
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def session_id(self) -> str | None:
        """The session the run worked in (every event names it)."""
        for event in self.events:
            found = event.get("sessionID")
            if isinstance(found, str):
                return found
        return None

    @property
    def texts(self) -> list[str]:
        """The assistant's text parts, in order."""
        return [
            str(event["part"]["text"])
            for event in self.events
            if event.get("type") == "text" and isinstance(event.get("part"), dict)
        ]


def opencode_argv(
    opencode: Path, prompt: str, *, session: str | None = None, extra_args: Sequence[str] = ()
) -> list[str]:
    argv = [str(opencode), "run", "--format", "json"]
    if session is not None:
        argv += ["--session", session]
    return [*argv, *extra_args, prompt]


def run_opencode(
    opencode: Path,
    prompt: str,
    *,
    env: Mapping[str, str],
    cwd: Path,
    session: str | None = None,
    timeout: float = 120.0,
    extra_args: Sequence[str] = (),
) -> OpencodeRun:
    """Run `opencode run --format json [--session ID] ... PROMPT` in cwd."""
    argv = opencode_argv(opencode, prompt, session=session, extra_args=extra_args)
    returncode, stdout, stderr = run_cli(argv, env=env, cwd=cwd, timeout=timeout)
    return OpencodeRun(returncode, json_lines(stdout), stdout, stderr)
