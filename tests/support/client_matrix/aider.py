"""aider (PyPI `aider-chat`), headless with `--message`, through the chat completions face.

aider offers the model no function tools: it reads files into the chat itself. The matrix's
tool case is its file-add flow: the working folder is a git repository that tracks notes.txt,
the prompt names notes.txt, aider asks "Add file to the chat?" (`--yes-always` says yes) and
sends the file's text with the prompt. The client reads the file and sends it, but the user's
prompt starts the read, not the model. aider would also add a file the model's answer names
and send "I added these files to the chat"; the matrix's prompt cannot reach that path, since
it names the file, so aider has added it before the model answers. The second case is a new
`aider --restore-chat-history notes.txt` run: the earlier turns come back from
`.aider.chat.history.md` and the file comes back into the chat.

Everything it writes stays in the run's HOME and working folder: `--dry-run` keeps the model's
edits off the files (so `--yes-always` approves file adds and nothing that writes), shell
command suggestions and URL fetching are off, update checks and analytics are off, the model's
limits come from a metadata file (aider knows nothing of glm-5.3-flash).
"""

from __future__ import annotations

import json
import subprocess
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
    install_pypi,
    run_checked,
)

VERSION = "0.86.2"
CONTEXT_TOKENS = 131072
OUTPUT_TOKENS = 8192
PROMPTS = {"plain": PLAIN_PROMPT, "tool": TOOL_PROMPT, "second": SECOND_PROMPT}
HISTORY = ".aider.chat.history.md"
# How aider (--no-pretty) heads the answer after the model's reasoning.
ANSWER_HEADING = "► **ANSWER**"


def _install() -> Path | str:
    return install_pypi("aider-chat", [f"aider-chat=={VERSION}"], check=["-c", "import aider.main"])


def _git(args: list[str], env: Mapping[str, str], work: Path) -> None:
    done = subprocess.run(
        ["git", *args], cwd=work, env=env, capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        raise CaseFailed(f"git {' '.join(args)}: {done.stdout}{done.stderr}")


def _prepare(run: Run, env: Mapping[str, str]) -> Path:
    """The user's project (a git repository tracking notes.txt) and aider's model metadata."""
    if not (run.work / ".git").exists():
        _git(["init", "-q"], env, run.work)
        _git(["add", "notes.txt"], env, run.work)
        _git(["commit", "-q", "-m", "notes"], env, run.work)
    metadata = run.home / "aider-model-metadata.json"
    metadata.write_text(
        json.dumps(
            {
                f"openai/{run.model}": {
                    "max_input_tokens": CONTEXT_TOKENS,
                    "max_output_tokens": OUTPUT_TOKENS,
                    "litellm_provider": "openai",
                    "mode": "chat",
                    "input_cost_per_token": 0,
                    "output_cost_per_token": 0,
                }
            }
        )
    )
    return metadata


def _run(python: Path, case: str, run: Run) -> str:
    git_identity = {
        "GIT_AUTHOR_NAME": "matrix",
        "GIT_AUTHOR_EMAIL": "matrix@example.invalid",
        "GIT_COMMITTER_NAME": "matrix",
        "GIT_COMMITTER_EMAIL": "matrix@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    # LiteLLM (inside aider) would fetch its model list from the network at import.
    env = base_env(run.home, {**git_identity, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    metadata = _prepare(run, env)
    argv = [
        str(python.parent / "aider"),
        "--model", f"openai/{run.model}",
        "--openai-api-base", f"{run.url}/v1",
        "--openai-api-key", run.key,
        "--model-metadata-file", str(metadata),
        "--message", PROMPTS[case],
        "--yes-always", "--dry-run", "--no-auto-commits", "--no-dirty-commits",
        "--no-suggest-shell-commands", "--no-detect-urls", "--no-gitignore",
        "--no-check-update", "--analytics-disable", "--no-show-release-notes",
        "--no-pretty", "--no-fancy-input", "--no-show-model-warnings",
        "--chat-history-file", str(run.work / HISTORY),
        "--input-history-file", str(run.home / ".aider.input.history"),
    ]  # fmt: skip
    if case == "second":
        argv += ["--restore-chat-history", "notes.txt"]
    stdout, _ = run_checked(argv, env, run.work, f"aider {case}")
    return _answer(stdout)


def _answer(stdout: str) -> str:
    """The model's answer in aider's output: after its ANSWER heading (the reasoning comes
    first) and before its token count line; the whole output if the heading is missing."""
    answer = stdout.rpartition(ANSWER_HEADING)[2] if ANSWER_HEADING in stdout else stdout
    return answer.split("\nTokens: ")[0].strip()


def _tool_call(work: Path) -> Mapping[str, Any]:
    # Never offered (aider declares no tools), so the simulator never makes this call.
    return {"name": "read_file", "arguments": {"path": "notes.txt"}}


CLIENTS = (
    MatrixClient(
        name="aider",
        title="aider",
        package="aider-chat",
        version=VERSION,
        registry="pypi",
        faces=("chat",),
        tested="`aider --message`; its file-add flow (a prompt naming a tracked file, "
        "`--yes-always`) in place of a tool call; `--restore-chat-history` to continue",
        tool_call=_tool_call,
        install=_install,
        run=_run,
        notes="`--model openai/glm-5.3-flash`, `--openai-api-base` ending in `/v1`; a "
        "`--model-metadata-file` with the context window",
    ),
)
