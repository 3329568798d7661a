"""Simon Willison's `llm` CLI (PyPI `llm`), through the chat completions face.

The gateway is an extra OpenAI-compatible model (`extra-openai-models.yaml` in the llm user
folder, `LLM_USER_PATH` here, with `supports_tools: true`), its key stored as `llm keys set`
stores it (keys.json). llm ships no file-reading tool (its built-ins are `llm_version` and
`llm_time`), so the read tool is the user's own Python function given with `--functions`,
which llm runs without asking. The second case is `llm -c`, which continues the latest
conversation from llm's log database, tool call and result included.
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
    MatrixClient,
    Run,
    base_env,
    install_pypi,
    run_checked,
)

VERSION = "0.36"
MODEL_ID = "flashbox"
KEY_NAME = "flashbox"
READ_FILE = '''
def read_file(path: str) -> str:
    """Read a text file of the working folder."""
    with open(path) as f:
        return f.read()
'''
PROMPTS = {"plain": PLAIN_PROMPT, "tool": TOOL_PROMPT, "second": SECOND_PROMPT}


def _install() -> Path | str:
    return install_pypi("llm", [f"llm=={VERSION}"], check=["-c", "import llm"])


def _configure(user_dir: Path, run: Run) -> None:
    user_dir.mkdir(parents=True, exist_ok=True)
    # JSON is YAML: the model list without a YAML writer in the tests' venv.
    models = [
        {
            "model_id": MODEL_ID,
            "model_name": run.model,
            "api_base": f"{run.url}/v1",
            "api_key_name": KEY_NAME,
            "supports_tools": True,
            "can_stream": True,
        }
    ]
    (user_dir / "extra-openai-models.yaml").write_text(json.dumps(models, indent=2))
    (user_dir / "keys.json").write_text(json.dumps({KEY_NAME: run.key}))


def _run(python: Path, case: str, run: Run) -> str:
    user_dir = run.home / "llm"
    if case == "plain":
        _configure(user_dir, run)
    argv = [str(python.parent / "llm"), "prompt", "-m", MODEL_ID]
    if case != "plain":
        # `-c` does not bring the tools back: a continued conversation offers them again.
        argv += ["--functions", READ_FILE]
    if case == "second":
        argv.append("-c")
    argv.append(PROMPTS[case])
    env = base_env(run.home, {"LLM_USER_PATH": str(user_dir)})
    stdout, _ = run_checked(argv, env, run.work, f"llm {case}")
    return stdout.strip()


def _tool_call(work: Path) -> Mapping[str, Any]:
    return {"name": "read_file", "arguments": {"path": "notes.txt"}}


CLIENTS = (
    MatrixClient(
        name="llm",
        title="llm (CLI)",
        package="llm",
        version=VERSION,
        registry="pypi",
        faces=("chat",),
        tested="`llm prompt` on an extra OpenAI-compatible model; `--functions` with a "
        "`read_file` function; `llm -c` to continue",
        tool_call=_tool_call,
        install=_install,
        run=_run,
        notes="`extra-openai-models.yaml`: `model_name: glm-5.3-flash`, `api_base` ending in "
        "`/v1`, `api_key_name`, `supports_tools: true`",
    ),
)
