"""Matrix driver: LiteLLM as a library against the gateway (runs in the client's venv).

`litellm.completion` with an `openai/` model and `api_base` goes to the chat completions face;
the driver runs the tool loop itself, as a LiteLLM app does, and keeps the message list in the
state file for the second case.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

# Before the import: LiteLLM fetches its model cost map from the network at import time
# unless told to use the copy it ships.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import litellm  # type: ignore[import-not-found]

PROMPTS = {
    "plain": "Say hello to the matrix.",
    "tool": "Read notes.txt and tell me what it reports.",
    "second": "Now say it in one word.",
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file of the working folder.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "the file's path"}},
                "required": ["path"],
            },
        },
    }
]
# A bound on the tool loop: the script asks for one call.
MAX_ROUNDS = 4


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--case", "--base-url", "--key", "--model", "--work", "--state"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    work, state = Path(args.work), Path(args.state)
    litellm.telemetry = False

    messages: list[dict[str, Any]] = json.loads(state.read_text()) if args.case == "second" else []
    messages.append({"role": "user", "content": PROMPTS[args.case]})
    for _ in range(MAX_ROUNDS):
        response = litellm.completion(
            model=f"openai/{args.model}",
            api_base=f"{args.base_url}/v1",
            api_key=args.key,
            messages=messages,
            tools=TOOLS,
            max_tokens=1024,
        )
        message = response.choices[0].message
        calls = message.tool_calls or []
        messages.append(message.model_dump(exclude_none=True))
        if not calls:
            break
        for call in calls:
            path = json.loads(call.function.arguments)["path"]
            content = (work / path).read_text()
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "name": "read_file", "content": content}
            )
    if args.case == "tool":
        state.write_text(json.dumps(messages))
    print(json.dumps({"answer": messages[-1].get("content") or ""}))


if __name__ == "__main__":
    main()
