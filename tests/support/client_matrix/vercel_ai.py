"""The Vercel AI SDK (npm `ai`) with its OpenAI, Anthropic and OpenAI-compatible providers.

One install holds the SDK and the three providers (pinned together: they share
`@ai-sdk/provider`); one node driver (drivers/vercel_ai.mjs) runs a case with the provider a
client names. Each provider is pointed at the gateway with `baseURL` = the gateway's URL + "/v1"
and `apiKey`, nothing else changed:

    vercel-ai-openai             createOpenAI: the Responses API (the provider's default), with
                                 `store` at its default, so the second turn sends the earlier
                                 turn's items back as `item_reference`s the gateway resolves
    vercel-ai-anthropic          createAnthropic: the Messages API
    vercel-ai-openai-compatible  createOpenAICompatible: Chat Completions

The plain case is `generateText`; the tool and second cases are `streamText` (what apps use)
with a `read_file` tool and `stopWhen: isStepCount(4)`, so the tool's result goes back within
the call; the second case continues from the tool case's messages plus `responseMessages`
(the OpenAI provider's second turn must carry an `item_reference`: the driver checks it).

`ai` 7 declares node >= 22 in `engines`; it runs on node 20 as well (npm only warns).
`result.response.messages` is deprecated in `ai` 7 for `result.responseMessages`.
The driver loads the packages by path from the install, since ESM ignores NODE_PATH.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.support.client_matrix.base import (
    DRIVERS,
    Face,
    MatrixClient,
    Run,
    install_npm,
    run_driver,
)

VERSION = "7.0.185"  # `ai`
PROVIDERS = {
    "openai": ("@ai-sdk/openai", "4.0.126"),
    "anthropic": ("@ai-sdk/anthropic", "4.0.112"),
    "openai-compatible": ("@ai-sdk/openai-compatible", "3.0.97"),
}
PACKAGES = (f"ai@{VERSION}", *(f"{name}@{pin}" for name, pin in PROVIDERS.values()))


def _install() -> Path | str:
    return install_npm("vercel-ai", PACKAGES)


def _runner(provider: str) -> Callable[[Path, str, Run], str]:
    def run(modules: Path, case: str, run: Run) -> str:
        node = shutil.which("node") or "node"
        command = [node, str(DRIVERS / "vercel_ai.mjs"), "--modules", str(modules)]
        return run_driver([*command, "--provider", provider], case, run)

    return run


def _tool_call(work: Path) -> Mapping[str, Any]:
    return {"name": "read_file", "arguments": {"path": "notes.txt"}}


def _client(provider: str, title: str, face: Face, tested: str, notes: str) -> MatrixClient:
    return MatrixClient(
        name=f"vercel-ai-{provider}",
        title=f"Vercel AI SDK, {title}",
        package=f"ai + {PROVIDERS[provider][0]}",
        version=f"{VERSION} + {PROVIDERS[provider][1]}",
        registry="npm",
        faces=(face,),
        tested=tested,
        tool_call=_tool_call,
        install=_install,
        run=_runner(provider),
        notes=notes,
    )


_LOOP = (
    "`generateText`; `streamText` with a `read_file` tool and `stopWhen`; the second turn "
    "from `responseMessages`"
)

CLIENTS = (
    _client(
        "openai",
        "OpenAI provider",
        "responses",
        f"{_LOOP} (`store` at its default: `item_reference`s)",
        "`createOpenAI({ baseURL: '<flashbox>/v1', apiKey })`",
    ),
    _client(
        "anthropic",
        "Anthropic provider",
        "messages",
        _LOOP,
        "`createAnthropic({ baseURL: '<flashbox>/v1', apiKey })`",
    ),
    _client(
        "openai-compatible",
        "OpenAI-compatible provider",
        "chat",
        _LOOP,
        "`createOpenAICompatible({ name, baseURL: '<flashbox>/v1', apiKey })`",
    ),
)
