"""Matrix driver: the OpenAI Agents SDK against the gateway (runs in the client's venv)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from agents import (  # type: ignore[import-not-found]
    Agent,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

PROMPTS = {
    "plain": "Say hello to the matrix.",
    "tool": "Read notes.txt and tell me what it reports.",
    "second": "Now say it in one word.",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--case", "--base-url", "--key", "--model", "--work", "--state"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    work, state = Path(args.work), Path(args.state)

    @function_tool
    def read_file(path: str) -> str:
        """Read a text file of the working folder."""
        return (work / path).read_text()

    set_tracing_disabled(True)
    set_default_openai_api("responses")
    set_default_openai_client(AsyncOpenAI(base_url=f"{args.base_url}/v1", api_key=args.key))
    agent = Agent(name="matrix", instructions="You are terse.", model=args.model, tools=[read_file])
    history = json.loads(state.read_text()) if args.case == "second" else []
    prompt = [*history, {"role": "user", "content": PROMPTS[args.case]}]
    result = asyncio.run(Runner.run(agent, prompt))
    if args.case == "tool":
        state.write_text(json.dumps(result.to_input_list()))
    print(json.dumps({"answer": str(result.final_output)}))


if __name__ == "__main__":
    main()
