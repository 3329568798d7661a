"""The real Codex CLI, installed once from npm and run headless against a local Responses API.

    codex = codex_or_skip()                         # pytest.skip when npm is missing or fails
    env = codex_env(tmp_path / "home", base_url + "/v1", api_key="test-key")
    run = run_codex(codex, "Read notes.txt", env=env, cwd=workdir)
    assert run.returncode == 0 and run.final_message is not None

`@openai/codex` is a small JavaScript launcher whose native binary comes in a per-platform
package (`@openai/codex-linux-x64` is an npm alias of `@openai/codex@<version>-linux-x64`,
listed in optionalDependencies); the installer in tests/support/npm_cli.py forces optional
dependencies on and runs `codex --version`, which fails without the binary.

`codex_env()` writes a throwaway CODEX_HOME whose config.toml defines one provider (base URL,
`wire_api = "responses"`, the key from an environment variable, no websockets, no OpenAI
login) and turns off what would reach other hosts: the update check, analytics, feedback, the
OpenTelemetry exporter, and the `plugins` feature (its startup sync calls github.com and
chatgpt.com). `run_codex()` runs `codex exec --json` read-only, ephemeral, with approvals off
and `--strict-config`, so that a key a newer CLI no longer knows fails loudly. What the CLI
sends in this setup is recorded in tests/fixtures/codex/README.md.
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

CODEX_PACKAGE = "@openai/codex"
CODEX_VERSION = "0.171.0"
CODEX = NpmCli(
    CODEX_PACKAGE,
    CODEX_VERSION,
    executable="codex",
    folder=f"codex-{CODEX_VERSION}",
    version_output=f"codex-cli {CODEX_VERSION}",
)
DEFAULT_MODEL = "glm-5.3-flash"
PROVIDER_ID = "flashbox"  # not a built-in id (openai, ollama, lmstudio, amazon-bedrock)
API_KEY_ENV = "FLASHBOX_API_KEY"
TomlValue = str | int | bool | list[str]


def install_codex(cache_dir: Path = AGENT_CLI_CACHE) -> Path | str:
    """Path of the pinned `codex` executable, or why it cannot be installed."""
    return install_npm_cli(CODEX, cache_dir)


def codex_or_skip() -> Path:
    """The `codex` executable, or pytest.skip with the reason it is unavailable."""
    found = install_codex()
    if isinstance(found, str):
        pytest.skip(found)
    return found


def _toml(value: TomlValue) -> str:
    # A JSON string or list of strings is a valid TOML basic string or array.
    return str(value).lower() if isinstance(value, bool) else json.dumps(value)


def config_toml(
    base_url: str,
    *,
    model: str = DEFAULT_MODEL,
    top_level: Mapping[str, TomlValue] | None = None,
    provider: Mapping[str, TomlValue] | None = None,
) -> str:
    """The config.toml of a headless run against base_url (the URL up to `/v1`).

    `top_level` adds or replaces root keys (e.g. `model_reasoning_effort`,
    `model_catalog_json`); `provider` adds or replaces keys of the provider table.
    """
    root: dict[str, TomlValue] = {
        "model": model,
        "model_provider": PROVIDER_ID,
        "approval_policy": "never",
        "sandbox_mode": "read-only",
        "check_for_update_on_startup": False,
        **(top_level or {}),
    }
    table: dict[str, TomlValue] = {
        "name": PROVIDER_ID,
        "base_url": base_url,
        "env_key": API_KEY_ENV,
        "wire_api": "responses",
        "requires_openai_auth": False,
        "supports_websockets": False,
        # A failed request fails the run at once instead of after Codex's backoff.
        "request_max_retries": 0,
        "stream_max_retries": 0,
        **(provider or {}),
    }
    tables: dict[str, Mapping[str, TomlValue]] = {
        "analytics": {"enabled": False},
        "feedback": {"enabled": False},
        "otel": {"exporter": "none"},
        "features": {"plugins": False},
        f"model_providers.{PROVIDER_ID}": table,
    }
    lines = [f"{key} = {_toml(value)}" for key, value in root.items()]
    for name, keys in tables.items():
        lines += ["", f"[{name}]", *(f"{key} = {_toml(value)}" for key, value in keys.items())]
    return "\n".join(lines) + "\n"


def codex_env(
    home: Path,
    base_url: str,
    api_key: str,
    *,
    model: str = DEFAULT_MODEL,
    top_level: Mapping[str, TomlValue] | None = None,
    provider: Mapping[str, TomlValue] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment for a headless run against base_url, with `home` as a fresh HOME.

    Nothing is inherited but PATH: a developer's own OPENAI_* variables, ~/.codex or login
    never leak into a test. Writes `home/.codex/config.toml` (config_toml()). TMPDIR points
    into `home`: Codex keeps its temporary files there, and it refuses to create its helper
    commands (the `apply_patch` alias on the shell's PATH) when CODEX_HOME lies under TMPDIR.
    """
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    config = config_toml(base_url, model=model, top_level=top_level, provider=provider)
    (codex_home / "config.toml").write_text(config)
    tmp = home / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        API_KEY_ENV: api_key,
    }
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class CodexRun:
    """One `codex exec --json` run: exit code (None when killed at the timeout), events, output."""

    returncode: int | None
    events: list[dict[str, Any]]
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def items(self, item_type: str) -> list[dict[str, Any]]:
        """The completed items of one type (agent_message, reasoning, command_execution...)."""
        return [
            event["item"]
            for event in self.events
            if event.get("type") == "item.completed" and event["item"].get("type") == item_type
        ]

    @property
    def final_message(self) -> str | None:
        messages = self.items("agent_message")
        return str(messages[-1]["text"]) if messages else None


def codex_argv(
    codex: Path, prompt: str, *, sandbox: str = "read-only", extra_args: Sequence[str] = ()
) -> list[str]:
    """The command line of a headless run that never waits for a person."""
    return [
        str(codex),
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--sandbox",
        sandbox,
        "--ephemeral",
        "--strict-config",
        *extra_args,
        "--",
        prompt,
    ]


def run_codex(
    codex: Path,
    prompt: str,
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout: float = 120.0,
    sandbox: str = "read-only",
    extra_args: Sequence[str] = (),
) -> CodexRun:
    """Run `codex exec --json ... -- PROMPT` in cwd; kill its process group at the timeout."""
    argv = codex_argv(codex, prompt, sandbox=sandbox, extra_args=extra_args)
    returncode, stdout, stderr = run_cli(argv, env=env, cwd=cwd, timeout=timeout)
    return CodexRun(returncode, json_lines(stdout), stdout, stderr)


def write_model_catalog(
    path: Path,
    *,
    model: str = DEFAULT_MODEL,
    context_window: int = 131072,
    base_instructions: str = "You are a coding agent working in the user's workspace.",
) -> dict[str, TomlValue]:
    """Write a model catalog with one entry for `model`; returns the config key that loads it.

    Without an entry Codex uses fallback metadata for an unknown model (and says so as an
    `error` item): its own base prompt, reasoning without an effort, no `apply_patch` tool.
    This entry sets high effort, a freeform (custom) `apply_patch` and text-only input. The
    fields are the ones 0.171.0 requires (it names a missing one) plus those; its
    `base_instructions` replace Codex's base prompt, which is the first developer message.
    """
    entry = {
        "slug": model,
        "display_name": model,
        "description": "Served by flashbox.",
        "default_reasoning_level": "high",
        "supported_reasoning_levels": [{"effort": "high", "description": "Thinks first."}],
        "shell_type": "unified_exec",
        "visibility": "list",
        "supported_in_api": True,
        "priority": 1,
        "base_instructions": base_instructions,
        "support_verbosity": False,
        "apply_patch_tool_type": "freeform",
        "truncation_policy": {"mode": "tokens", "limit": 10000},
        "context_window": context_window,
        "experimental_supported_tools": [],
        "input_modalities": ["text"],
    }
    path.write_text(json.dumps({"models": [entry]}, indent=1) + "\n")
    return {"model_catalog_json": str(path)}
