"""Matrix driver: LangChain's chat models in an agent against the gateway (runs in the
client's venv). `--provider openai` is ChatOpenAI (chat completions), `--provider anthropic`
ChatAnthropic (Messages). Not named after a package: a driver's folder comes first on
sys.path, so `langchain_openai.py` here would shadow the package it imports.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from langchain.agents import create_agent  # type: ignore[import-not-found]
from langchain_core.messages import (  # type: ignore[import-not-found]
    HumanMessage,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.tools import tool  # type: ignore[import-not-found]

PROMPTS = {
    "plain": "Say hello to the matrix.",
    "tool": "Read notes.txt and tell me what it reports.",
    "second": "Now say it in one word.",
}


def chat_model(provider: str, base_url: str, key: str, model: str) -> Any:
    if provider == "openai":
        from langchain_openai import ChatOpenAI  # type: ignore[import-not-found]

        return ChatOpenAI(model=model, base_url=f"{base_url}/v1", api_key=key, max_tokens=1024)
    from langchain_anthropic import ChatAnthropic  # type: ignore[import-not-found]

    # The Anthropic SDK adds /v1/messages to its base URL itself.
    return ChatAnthropic(model=model, base_url=base_url, api_key=key, max_tokens=1024)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", choices=("openai", "anthropic"), required=True)
    for flag in ("--case", "--base-url", "--key", "--model", "--work", "--state"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    work, state = Path(args.work), Path(args.state)

    @tool
    def read_file(path: str) -> str:
        """Read a text file of the working folder."""
        return (work / path).read_text()

    model = chat_model(args.provider, args.base_url, args.key, args.model)
    agent = create_agent(model, tools=[read_file], system_prompt="You are terse.")
    history = messages_from_dict(json.loads(state.read_text())) if args.case == "second" else []
    result = agent.invoke({"messages": [*history, HumanMessage(PROMPTS[args.case])]})
    messages = result["messages"]
    if args.case == "tool":
        state.write_text(json.dumps(messages_to_dict(messages)))
    print(json.dumps({"answer": messages[-1].text}))


if __name__ == "__main__":
    main()
