"""Cline's CLI (npm `cline`), headless, through the chat face.

`cline auth -p openai-compatible -k KEY -b URL/v1 -m MODEL` writes the throwaway HOME's
`~/.cline/data/settings/providers.json`; `cline --json PROMPT` runs one task headless (its
events as JSON lines, the last a `run_result` with the answer's `text`). The tool case runs with
`--thinking xhigh` (the chat request carries `reasoning_effort: "xhigh"`). Cline's headless mode
approves every tool or none (`--auto-approve`, default true there; no per-tool policy on the
command line), so the read tool runs under the default.

The second case does not run headless in 3.0.65: `--id SESSION` (its only resume flag) switches
the CLI to its interactive TUI and, with `--json`, exits 1 ("JSON output mode requires a prompt
argument or piped stdin (interactive mode is unsupported)"). Its ACP mode (`--acp`) loads the
session (`session/load`), but then picks the model from the provider's built-in catalogue and
sends the custom model id's fallback (`gpt-4o`), whatever `session/set_model` says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.client_matrix.base import (
    PLAIN_PROMPT,
    TOOL_PROMPT,
    CaseFailed,
    MatrixClient,
    Run,
    base_env,
    install_npm,
    run_checked,
)

VERSION = "3.0.65"
PROMPTS = {"plain": PLAIN_PROMPT, "tool": TOOL_PROMPT}
PROVIDER = "openai-compatible"
SECOND_BLOCKED = (
    "3.0.65 resumes a session only in its interactive TUI (`--id` with `--json` exits 1), and its "
    "ACP mode's `session/load` sends its catalogue's fallback model (gpt-4o), not the custom one"
)


def _install() -> Path | str:
    return install_npm("cline-cli", [f"cline@{VERSION}"], executable="cline")


def _env(run: Run) -> dict[str, str]:
    # Cline's own update check and its hub daemon stay off; state lies under HOME (~/.cline).
    return base_env(run.home, {"CLINE_NO_AUTO_UPDATE": "1"})


def _configure(cline: Path, run: Run, env: Mapping[str, str]) -> None:
    """`cline auth` for the gateway, once per HOME (what a user runs once)."""
    if run.state.get("cline_configured"):
        return
    argv = [
        str(cline), "auth", "-p", PROVIDER, "-k", run.key, "-b", f"{run.url}/v1",
        "-m", run.model,
    ]  # fmt: skip
    run_checked(argv, env, run.work, "cline auth")
    run.state["cline_configured"] = True


def _answer(stdout: str, what: str) -> str:
    for line in reversed(stdout.splitlines()):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "run_result":
            if event.get("finishReason") != "completed":
                raise CaseFailed(f"{what}: finished {event.get('finishReason')!r}")
            return str(event.get("text", ""))
    raise CaseFailed(f"{what}: no run_result in {stdout[-2000:]!r}")


def _run(cline: Path, case: str, run: Run) -> str:
    env = _env(run)
    _configure(cline, run, env)
    argv = [str(cline), "--json", "-c", str(run.work)]
    if case == "tool":
        argv += ["--thinking", "xhigh"]
    argv.append(PROMPTS[case])
    stdout, _ = run_checked(argv, env, run.work, f"cline {case}")
    return _answer(stdout, f"cline {case}")


def _tool_call(work: Path) -> Mapping[str, Any]:
    return {"name": "read_files", "arguments": {"files": [{"path": str(work / "notes.txt")}]}}


CLIENTS = (
    MatrixClient(
        name="cline-cli",
        title="Cline CLI",
        package="cline",
        version=VERSION,
        registry="npm",
        faces=("chat",),
        tested="`cline --json` with its `read_files` tool and `--thinking xhigh`",
        tool_call=_tool_call,
        install=_install,
        run=_run,
        notes="`cline auth -p openai-compatible -b URL/v1`",
        not_headless={"second": SECOND_BLOCKED},
    ),
)
