"""The client matrix: popular agents and SDKs, as users install them, through the gateway.

    for client in matrix_clients():            # every MatrixClient, in README order
        installed = client.install()           # .cache/clients/..., or a reason to skip
        report = run_matrix(client, installed, tmp_path)
        assert report.problems() == []

Each client module under this package exports `CLIENTS` (one module may hold several: the
Vercel AI SDK's three providers). `make test-cli` runs every one (tests/e2e/test_client_matrix.py);
what they sent is recorded (scripts/record_client_matrix.py) into tests/fixtures/clients/ and
replayed in `make test` (tests/e2e/test_client_replay.py). The README's table is `readme_table()`.
"""

from __future__ import annotations

import importlib

from tests.support.client_matrix.base import MatrixClient

# README order: the agent CLIs, then the libraries.
MODULES = (
    "qwen_code",
    "continue_cli",
    "kilo",
    "cline",
    "aider",
    "llm_cli",
    "openai_agents",
    "langchain",
    "litellm_lib",
    "vercel_ai",
)

# Clients a user runs that the matrix cannot run headless here, with the reason (README too).
NOT_HEADLESS: dict[str, str] = {}

# The three agent CLIs with long sessions of their own (tests/e2e/test_cli_sessions.py):
# README rows only, their cases are those sessions'.
LONG_SESSIONS = (
    ("Claude Code", "@anthropic-ai/claude-code", "messages"),
    ("Codex", "@openai/codex", "responses"),
    ("opencode", "opencode-ai", "chat"),
)


def matrix_clients() -> list[MatrixClient]:
    clients: list[MatrixClient] = []
    for module in MODULES:
        loaded = importlib.import_module(f"{__name__}.{module}")
        clients.extend(loaded.CLIENTS)
    return clients


def client(name: str) -> MatrixClient:
    for found in matrix_clients():
        if found.name == name:
            return found
    raise KeyError(name)


def readme_table() -> str:
    """The README's matrix table (tests/scripts/test_client_matrix_readme.py keeps them equal)."""
    from tests.support.agent_cli import CLAUDE_CODE_VERSION
    from tests.support.codex_cli import CODEX_VERSION
    from tests.support.opencode_cli import OPENCODE_VERSION

    faces = {"chat": "Chat Completions", "messages": "Messages", "responses": "Responses"}
    rows = [
        "| client | package | version | face | pointed at flashbox by | what is tested |",
        "|---|---|---|---|---|---|",
    ]
    for (title, package, face), version in zip(
        LONG_SESSIONS, (CLAUDE_CODE_VERSION, CODEX_VERSION, OPENCODE_VERSION), strict=True
    ):
        rows.append(
            f"| {title} | `{package}` | {version} | {faces[face]} | the section above | long "
            "sessions: tool rounds, two subagents at once, resume, its own compaction |"
        )
    for found in matrix_clients():
        packages = " + ".join(f"`{p}`" for p in found.package.split(" + "))
        used = ", ".join(faces[f] for f in found.faces)
        tested = found.tested + "".join(
            f"; not run: {case} turn ({reason})" for case, reason in found.not_headless.items()
        )
        rows.append(
            f"| {found.title} | {packages} | {found.version} | {used} | {found.notes} | {tested} |"
        )
    for title, reason in NOT_HEADLESS.items():
        rows.append(f"| {title} | | | | | not run: {reason} |")
    return "\n".join(rows)
