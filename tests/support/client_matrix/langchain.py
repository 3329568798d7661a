"""LangChain's chat models (PyPI `langchain-openai`, `langchain-anthropic`) in a LangChain
agent: ChatOpenAI through the chat completions face, ChatAnthropic through the Messages face.

The driver (drivers/langchain_chat.py) builds `create_agent(model, tools=[read_file])`, the
agent loop LangChain 1.x offers, and continues the tool conversation from the message list the
first run returned (`messages_to_dict` into the state file and back), as an app that keeps its
history does. Each provider installs into its own virtualenv, with `langchain` for the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.client_matrix.base import DRIVERS, MatrixClient, Run, install_pypi, run_driver

LANGCHAIN_VERSION = "1.5.2"
OPENAI_VERSION = "1.8.1"
ANTHROPIC_VERSION = "1.7.10"
_CHECK = "import langchain.agents, langchain_{provider}"


def _install(provider: str, version: str) -> Path | str:
    return install_pypi(
        f"langchain-{provider}",
        [f"langchain=={LANGCHAIN_VERSION}", f"langchain-{provider}=={version}"],
        check=["-c", _CHECK.format(provider=provider)],
    )


def _runner(provider: str) -> Any:
    def run(python: Path, case: str, run: Run) -> str:
        driver = [str(python), str(DRIVERS / "langchain_chat.py"), "--provider", provider]
        return run_driver(driver, case, run)

    return run


def _tool_call(work: Path) -> Mapping[str, Any]:
    return {"name": "read_file", "arguments": {"path": "notes.txt"}}


_TESTED = "`create_agent` over `{model}` with a `@tool`; the second turn from the kept messages"
CLIENTS = (
    MatrixClient(
        name="langchain-openai",
        title="LangChain, OpenAI chat model",
        package="langchain-openai",
        version=OPENAI_VERSION,
        registry="pypi",
        faces=("chat",),
        tested=_TESTED.format(model="ChatOpenAI"),
        tool_call=_tool_call,
        install=lambda: _install("openai", OPENAI_VERSION),
        run=_runner("openai"),
        notes='`ChatOpenAI(base_url=".../v1", api_key=..., model="glm-5.3-flash")`',
    ),
    MatrixClient(
        name="langchain-anthropic",
        title="LangChain, Anthropic chat model",
        package="langchain-anthropic",
        version=ANTHROPIC_VERSION,
        registry="pypi",
        faces=("messages",),
        tested=_TESTED.format(model="ChatAnthropic"),
        tool_call=_tool_call,
        install=lambda: _install("anthropic", ANTHROPIC_VERSION),
        run=_runner("anthropic"),
        notes="`ChatAnthropic(base_url=...)` without `/v1` (the SDK adds it), `max_tokens` set",
    ),
)
