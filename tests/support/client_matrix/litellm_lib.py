"""LiteLLM (PyPI `litellm`) as a library, through the chat completions face.

`litellm.completion(model="openai/glm-5.3-flash", api_base=..., api_key=...)` is LiteLLM's
route to any OpenAI-compatible server. The driver offers one function tool, `read_file`, runs
the tool loop itself and continues the tool conversation from the message list it kept. It sets
`LITELLM_LOCAL_MODEL_COST_MAP` so the import does not fetch LiteLLM's model list online.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.client_matrix.base import DRIVERS, MatrixClient, Run, install_pypi, run_driver

VERSION = "1.110.2"


def _install() -> Path | str:
    return install_pypi("litellm", [f"litellm=={VERSION}"], check=["-c", "import litellm"])


def _run(python: Path, case: str, run: Run) -> str:
    return run_driver([str(python), str(DRIVERS / "litellm_lib.py")], case, run)


def _tool_call(work: Path) -> Mapping[str, Any]:
    return {"name": "read_file", "arguments": {"path": "notes.txt"}}


CLIENTS = (
    MatrixClient(
        name="litellm",
        title="LiteLLM (library)",
        package="litellm",
        version=VERSION,
        registry="pypi",
        faces=("chat",),
        tested="`litellm.completion` (`openai/` model, `api_base`) with a function tool and its "
        "own tool loop; the second turn from the kept messages",
        tool_call=_tool_call,
        install=_install,
        run=_run,
        notes='`model="openai/glm-5.3-flash"`, `api_base` ending in `/v1`; '
        "`LITELLM_LOCAL_MODEL_COST_MAP=True` where the machine has no internet",
    ),
)
