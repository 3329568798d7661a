"""qwen-code (npm `@qwen-code/qwen-code`, the `qwen` command), headless, through the chat face.

The throwaway HOME holds `~/.qwen/settings.json`: one OpenAI-compatible model under
`modelProviders.openai` (its `baseUrl` the gateway's /v1, its key read from the variable that
`envKey` names), selected with `security.auth.selectedType` "openai", and update checks, usage
statistics and telemetry off. `qwen PROMPT --output-format json` runs one turn without a terminal
and prints its events as one JSON array; the last is the `result`, with the answer and the session
id. The tool case's model calls qwen's own `read_file` (an absolute `file_path`), which its default
approval mode runs without asking; the second case is `--resume <session id>`.

Besides the turn, qwen sends a request of its own after each one (its memory extractor, on the same
model): the script answers it with SIDE_ANSWER.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.client_matrix.base import (
    PLAIN_PROMPT,
    SECOND_PROMPT,
    TOOL_PROMPT,
    CaseFailed,
    MatrixClient,
    Run,
    base_env,
    install_npm,
    run_checked,
)

VERSION = "0.24.4"
PACKAGE = "@qwen-code/qwen-code"
KEY_ENV = "FLASHBOX_API_KEY"
PROMPTS = {"plain": PLAIN_PROMPT, "tool": TOOL_PROMPT, "second": SECOND_PROMPT}


def _install() -> Path | str:
    return install_npm("qwen-code", [f"{PACKAGE}@{VERSION}"], "qwen")


def settings(base_url: str, model: str) -> dict[str, Any]:
    """`~/.qwen/settings.json` for one model behind `base_url` (up to /v1)."""
    return {
        "modelProviders": {
            "openai": [{"id": model, "name": model, "baseUrl": base_url, "envKey": KEY_ENV}]
        },
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": model},
        "general": {"enableAutoUpdate": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }


def _result(stdout: str, case: str) -> Mapping[str, Any]:
    """The `result` event of a `--output-format json` run."""
    try:
        events = json.loads(stdout)
    except ValueError:
        raise CaseFailed(f"qwen {case}: stdout is not a JSON array: {stdout[-2000:]!r}") from None
    results = [e for e in events if isinstance(e, dict) and e.get("type") == "result"]
    if not results:
        raise CaseFailed(f"qwen {case}: no result event in {stdout[-2000:]!r}")
    result: Mapping[str, Any] = results[-1]
    if result.get("is_error") or not isinstance(result.get("result"), str):
        raise CaseFailed(f"qwen {case}: failed turn {json.dumps(result)[:2000]}")
    return result


def _run(qwen: Path, case: str, run: Run) -> str:
    config = run.home / ".qwen" / "settings.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(settings(f"{run.url}/v1", run.model), indent=2) + "\n")
    # The preconnect warm-up only targets the vendors' default URLs; off all the same.
    env = base_env(run.home, {KEY_ENV: run.key, "QWEN_CODE_DISABLE_PRECONNECT": "1"})
    argv = [str(qwen), PROMPTS[case], "--output-format", "json"]
    if case == "second":
        argv += ["--resume", str(run.state["session"])]
    stdout, _ = run_checked(argv, env, run.work, f"qwen {case}")
    result = _result(stdout, case)
    if case == "tool":
        run.state["session"] = result["session_id"]
    return str(result["result"])


def _tool_call(work: Path) -> Mapping[str, Any]:
    # qwen's read_file takes an absolute path only.
    return {"name": "read_file", "arguments": {"file_path": str(work / "notes.txt")}}


CLIENTS = (
    MatrixClient(
        name="qwen-code",
        title="qwen-code",
        package=PACKAGE,
        version=VERSION,
        registry="npm",
        faces=("chat",),
        tested="`qwen PROMPT --output-format json`, its `read_file` tool, `--resume <session>`",
        tool_call=_tool_call,
        install=_install,
        run=_run,
        notes=(
            "`~/.qwen/settings.json`: a `modelProviders.openai` entry (`baseUrl` the gateway's "
            '/v1, `envKey`) and `security.auth.selectedType: "openai"`'
        ),
    ),
)
