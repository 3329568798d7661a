"""The OpenAI Agents SDK (PyPI `openai-agents`), as a library, through the Responses face.

Its default model class is the Responses one; the driver points an `AsyncOpenAI` client at the
gateway (`set_default_openai_client`), turns the SDK's trace export off (it would post to
OpenAI's servers), and gives the agent one function tool, `read_file`. The second case continues
the tool conversation from `result.to_input_list()`, as an app that keeps its history does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.client_matrix.base import DRIVERS, MatrixClient, Run, install_pypi, run_driver

VERSION = "0.24.0"


def _install() -> Path | str:
    return install_pypi(
        "openai-agents", [f"openai-agents=={VERSION}"], check=["-c", "import agents"]
    )


def _run(python: Path, case: str, run: Run) -> str:
    return run_driver([str(python), str(DRIVERS / "openai_agents.py")], case, run)


def _tool_call(work: Path) -> Mapping[str, Any]:
    return {"name": "read_file", "arguments": {"path": "notes.txt"}}


CLIENTS = (
    MatrixClient(
        name="openai-agents",
        title="OpenAI Agents SDK",
        package="openai-agents",
        version=VERSION,
        registry="pypi",
        faces=("responses",),
        tested="`Runner.run` with a function tool; the second turn from `to_input_list()`",
        tool_call=_tool_call,
        install=_install,
        run=_run,
    ),
)
