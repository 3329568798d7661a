"""Continue's CLI (npm `@continuedev/cli`, the `cn` command), headless, through the chat face.

The throwaway HOME holds `~/.continue/config.yaml`: one model with `provider: openai`, its
`apiBase` the gateway's /v1 and its key, serving every role, with its context length and output
budget set as a user should (Continue has no entry for glm-5.3-flash: it would assume 200k tokens
of context, which decides when it compacts, and send no max_tokens). `cn -p PROMPT
--format json --config FILE` runs one turn without a terminal or a Continue account and prints
`{"response": ...}`; headless, its default policies let the model run `Read` without asking. The
tool case's model calls `Read` with an absolute `filepath`; the second case is `--resume`, which
continues the most recently written session under `~/.continue/sessions/` (the tool case's).
Continue's OpenTelemetry metrics are off (CONTINUE_METRICS_ENABLED=0); headless runs never check
for updates.
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

VERSION = "1.5.47"
PACKAGE = "@continuedev/cli"
PROMPTS = {"plain": PLAIN_PROMPT, "tool": TOOL_PROMPT, "second": SECOND_PROMPT}
CONTEXT_TOKENS = 131072
OUTPUT_TOKENS = 8192


def _install() -> Path | str:
    return install_npm("continue-cli", [f"{PACKAGE}@{VERSION}"], "cn")


def config_yaml(base_url: str, key: str, model: str) -> str:
    """`~/.continue/config.yaml` for one model behind `base_url` (up to /v1). JSON is YAML:
    json.dumps quotes each value safely."""
    config: dict[str, Any] = {
        "name": "flashbox",
        "version": "1.0.0",
        "schema": "v1",
        "models": [
            {
                "name": model,
                "provider": "openai",
                "model": model,
                "apiBase": base_url,
                "apiKey": key,
                "roles": ["chat", "edit", "apply", "summarize"],
                "capabilities": ["tool_use"],
                "defaultCompletionOptions": {
                    "contextLength": CONTEXT_TOKENS,
                    "maxTokens": OUTPUT_TOKENS,
                },
            }
        ],
    }
    return json.dumps(config, indent=2) + "\n"


def _answer(stdout: str, case: str) -> str:
    lines = stdout.strip().splitlines()
    try:
        printed = json.loads(lines[-1])
        answer = printed["response"]
    except (IndexError, ValueError, KeyError, TypeError):
        raise CaseFailed(f"cn {case}: no response line in {stdout[-2000:]!r}") from None
    if printed.get("status") != "success" or not isinstance(answer, str):
        raise CaseFailed(f"cn {case}: {lines[-1][:2000]}")
    return answer


def _run(cn: Path, case: str, run: Run) -> str:
    config = run.home / ".continue" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(config_yaml(f"{run.url}/v1", run.key, run.model))
    env = base_env(
        run.home, {"CONTINUE_METRICS_ENABLED": "0", "CONTINUE_CLI_ENABLE_TELEMETRY": "0"}
    )
    argv = [str(cn), "-p", PROMPTS[case], "--format", "json", "--config", str(config)]
    if case == "second":
        argv.append("--resume")
    stdout, _ = run_checked(argv, env, run.work, f"cn {case}")
    return _answer(stdout, case)


def _tool_call(work: Path) -> Mapping[str, Any]:
    return {"name": "Read", "arguments": {"filepath": str(work / "notes.txt")}}


CLIENTS = (
    MatrixClient(
        name="continue-cli",
        title="Continue CLI",
        package=PACKAGE,
        version=VERSION,
        registry="npm",
        faces=("chat",),
        tested="`cn -p PROMPT --format json --config FILE`, its `Read` tool, `--resume`",
        tool_call=_tool_call,
        install=_install,
        run=_run,
        notes=(
            "`~/.continue/config.yaml`: a model with `provider: openai`, `apiBase` the gateway's "
            "/v1, `apiKey`, and `defaultCompletionOptions.contextLength` / `maxTokens`"
        ),
    ),
)
