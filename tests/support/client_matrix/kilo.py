"""Kilo's CLI (npm `@kilocode/cli`, an opencode fork), headless, through the chat face.

Each case starts `kilo serve` (loopback, a random password) and runs `kilo run --attach URL
--format json` against it, which prints the run's events as JSON lines. The throwaway HOME's
`~/.config/kilo/kilo.json` defines one OpenAI-compatible provider (the bundled
`@ai-sdk/openai-compatible`) serving glm-5.3-flash, for the turns and (`small_model`) for the
session title, with its context and output limits set; the environment turns off what would
reach other hosts (the models catalogue, update checks, default plugins, LSP downloads,
sharing, session ingest, indexing, telemetry). Permissions: the read tool is allowed and
everything else denied, so no `--auto`. The tool case waits for Kilo's title request (sent with
`reasoning_effort: "none"`) to name the session; the second continues it with `--session ID`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
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
    install_npm,
    run_checked,
)
from tests.support.npm_cli import json_lines

# 7.8.1 is npm's latest, but its linux-x64 binary package was never published; 7.7.7 is the
# newest whose native binary installs (the launcher fails without it).
VERSION = "7.7.7"
PROVIDER = "flashbox"
PROMPTS = {"plain": PLAIN_PROMPT, "tool": TOOL_PROMPT, "second": SECOND_PROMPT}
# What the gateway serves (docs/architecture.md); Kilo compacts and sizes requests by these.
CONTEXT_TOKENS = 131072
OUTPUT_TOKENS = 8192
SERVER_START_S = 90.0
TITLE_WAIT_S = 60.0
DEFAULT_TITLE = "New session - "  # what Kilo names a session until it is titled


def _install() -> Path | str:
    return install_npm("kilo-cli", [f"@kilocode/cli@{VERSION}"], executable="kilo")


def _config(run: Run) -> dict[str, Any]:
    return {
        "$schema": "https://app.kilo.ai/config.json",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "flashbox",
                "options": {"baseURL": f"{run.url}/v1", "apiKey": run.key},
                "models": {
                    run.model: {
                        "name": run.model,
                        "tool_call": True,
                        "reasoning": True,
                        "limit": {"context": CONTEXT_TOKENS, "output": OUTPUT_TOKENS},
                    }
                },
            }
        },
        "model": f"{PROVIDER}/{run.model}",
        "small_model": f"{PROVIDER}/{run.model}",
        # Headless: the read tool runs unasked, anything else is refused rather than asked.
        "permission": {"*": "deny", "read": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }


def _env(run: Run) -> dict[str, str]:
    config = run.home / ".config" / "kilo" / "kilo.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(_config(run), indent=2) + "\n")
    off = (
        "DISABLE_AUTOUPDATE", "DISABLE_MODELS_FETCH", "DISABLE_DEFAULT_PLUGINS",
        "DISABLE_LSP_DOWNLOAD", "DISABLE_SHARE", "DISABLE_CLAUDE_CODE", "DISABLE_SESSION_INGEST",
        "DISABLE_CODEBASE_INDEXING", "DISABLE_EXTERNAL_SKILLS", "DISABLE_PROJECT_CONFIG",
    )  # fmt: skip
    # The server's password: a run and the server share it; nothing else on loopback gets in.
    password = run.state.setdefault("kilo_password", secrets.token_hex(16))
    extra = {f"KILO_{name}": "1" for name in off}
    extra |= {"KILO_TELEMETRY_LEVEL": "off", "KILO_SERVER_PASSWORD": str(password)}
    return base_env(run.home, extra)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, password: str) -> Any:
    """GET a route of the Kilo server (basic auth, user `kilo`); its JSON, or None."""
    token = base64.b64encode(f"kilo:{password}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _server(kilo: Path, env: Mapping[str, str], work: Path) -> Iterator[str]:
    """`kilo serve` on a free loopback port, up until the block ends; its URL.

    A one-shot `kilo run` disposes of its instance as soon as the turn ends, which cancels
    the session-title request Kilo defers to then; a server, as its TUI and editors use, lets
    it go out. Killed as a process group: the npm launcher leaves the native child behind.
    """
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [str(kilo), "serve", "--hostname", "127.0.0.1", "--port", str(port)]
    with tempfile.TemporaryFile(dir=env["HOME"]) as log:
        proc = subprocess.Popen(
            argv, cwd=work, env=dict(env), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + SERVER_START_S
            while _get(f"{url}/session", env["KILO_SERVER_PASSWORD"]) is None:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    said = log.read().decode(errors="replace")[-2000:]
                    raise CaseFailed(f"kilo serve did not come up on {url}: {said}")
                time.sleep(0.2)
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _await_title(url: str, password: str, session: str) -> None:
    """Wait until Kilo has titled the session (its small-model request went through)."""
    deadline = time.monotonic() + TITLE_WAIT_S
    title = None
    while time.monotonic() < deadline:
        found = _get(f"{url}/session/{session}", password)
        title = found.get("title") if isinstance(found, dict) else None
        if isinstance(title, str) and title and not title.startswith(DEFAULT_TITLE):
            return
        time.sleep(0.2)
    raise CaseFailed(f"kilo: session {session} kept its default title {title!r}")


def _run(kilo: Path, case: str, run: Run) -> str:
    env = _env(run)
    with _server(kilo, env, run.work) as url:
        argv = [str(kilo), "run", "--attach", url, "--dir", str(run.work), "--format", "json"]
        if case == "second":
            argv += ["--session", str(run.state["kilo_session"])]
        argv.append(PROMPTS[case])
        stdout, _ = run_checked(argv, env, run.work, f"kilo run {case}")
        events = json_lines(stdout)
        session = next(
            (e["sessionID"] for e in events if isinstance(e.get("sessionID"), str)), None
        )
        if session is None:
            raise CaseFailed(f"kilo run {case}: no session in {stdout[-2000:]!r}")
        if case == "tool":
            run.state["kilo_session"] = session
            # Kilo titles a session once it has done work (a tool ran): the request with
            # `reasoning_effort: "none"`.
            _await_title(url, env["KILO_SERVER_PASSWORD"], session)
    texts = [
        str(e["part"]["text"])
        for e in events
        if e.get("type") == "text" and isinstance(e.get("part"), dict)
    ]
    return "".join(texts)


def _tool_call(work: Path) -> Mapping[str, Any]:
    return {"name": "read", "arguments": {"filePath": str(work / "notes.txt")}}


CLIENTS = (
    MatrixClient(
        name="kilo-cli",
        title="Kilo CLI",
        package="@kilocode/cli",
        version=VERSION,
        registry="npm",
        faces=("chat",),
        tested="`kilo run --attach` (`kilo serve`): `read` tool, session title, `--session`",
        tool_call=_tool_call,
        install=_install,
        run=_run,
        notes="a custom `@ai-sdk/openai-compatible` provider in `kilo.json`",
    ),
)
