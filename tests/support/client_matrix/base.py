"""The client matrix's common parts: what a client is, the three cases, the script, installs.

Every client in the matrix (tests/support/client_matrix/__init__.py lists them) runs the same
three cases against the gateway over a scripted simulator, headless, with a throwaway HOME:

    plain   a fresh conversation, one prompt, one text answer (PLAIN_ANSWER)
    tool    a fresh conversation whose model calls the client's read tool on notes.txt; the
            client runs it and sends the result back (it holds MARKER); the answer is TOOL_ANSWER
    second  the tool conversation continued (the client's resume flag, or the history it keeps)
            with SECOND_PROMPT; the answer is SECOND_ANSWER and the request carries the history

A client is a `MatrixClient`: its pinned package, the faces it uses, the call the model makes for
its read tool, how it installs into `.cache/clients/` and how it runs one case. Drivers for
libraries (Python SDKs, the Vercel AI SDK) are small programs under `drivers/`, run in the
client's own virtualenv or node_modules with `--case`, `--base-url`, `--key`, `--model`,
`--work` and `--state FILE` (what a case leaves for the next: a session id, the history), and
print `{"answer": "..."}` as their last line of output.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tests.support.npm_cli import run_cli
from tests.support.procs import REPO_ROOT

CASES = ("plain", "tool", "second")
MODEL = "glm-5.3-flash"
CLIENTS_CACHE = REPO_ROOT / ".cache" / "clients"
DRIVERS = Path(__file__).resolve().parent / "drivers"
# A PyPI client's install (aider pulls ~100 packages) or an npm one (native binaries).
INSTALL_TIMEOUT_S = 900.0
CASE_TIMEOUT_S = 240.0

PLAIN_PROMPT = "Say hello to the matrix."
PLAIN_ANSWER = "Hello from flashbox."
TOOL_PROMPT = "Read notes.txt and tell me what it reports."
TOOL_ANSWER = "The notes report sunny weather."
SECOND_PROMPT = "Now say it in one word."
SECOND_ANSWER = "Sunny."
# In notes.txt, so in the tool result the client sends back: proof the round trip happened.
MARKER = "matrix-7781"
NOTES = f"Weather log ({MARKER}): sunny, 22 degrees, light wind.\n"
# Requests the cases do not name (session titles, summaries, a client's own checks).
SIDE_ANSWER = "Matrix session"

Registry = Literal["npm", "pypi"]
Face = Literal["chat", "messages", "responses"]


class CaseFailed(AssertionError):
    """A client's run of a case failed; the message carries its output."""


@dataclass
class Run:
    """What one case of one client runs against and leaves behind."""

    url: str  # the gateway's base URL (no /v1), here the recording proxy in front of it
    key: str
    home: Path  # a throwaway HOME, shared by the client's three cases
    work: Path  # the working folder: notes.txt
    model: str = MODEL
    state: dict[str, Any] = field(default_factory=dict)  # one case's leftovers for the next

    @property
    def state_file(self) -> Path:
        return self.home.parent / "driver-state.json"


@dataclass(frozen=True)
class MatrixClient:
    name: str  # the matrix's id: tests, fixtures folder, README row
    title: str  # the README's name for it
    package: str  # what is installed: an npm or PyPI package (the README shows it)
    version: str  # pinned
    registry: Registry
    faces: tuple[Face, ...]  # the gateway faces its requests go to
    tested: str  # the README's "what is tested" cell
    # The call the scripted model makes for the tool case: {"name", "arguments"}, given `work`.
    tool_call: Callable[[Path], Mapping[str, Any]]
    install: Callable[[], Path | str]  # an executable or interpreter, or why it cannot install
    run: Callable[[Path, str, Run], str]  # (installed, case, run) -> the final answer's text
    notes: str = ""  # what a user should know to set it up like this (the README's last cell)
    # Cases the client cannot run headless, with the reason (the README's row says so): their
    # checks are left out, never passed by pretending.
    not_headless: Mapping[str, str] = field(default_factory=dict)

    @property
    def cases(self) -> tuple[str, ...]:
        return tuple(case for case in CASES if case not in self.not_headless)


def prepare_work(work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "notes.txt").write_text(NOTES)


def script_for(client: MatrixClient, work: Path) -> dict[str, Any]:
    """The simulator's script (engine/sim/script.py) for the client's three cases."""
    return {
        "max_calls": 16,
        "rules": [
            {"when": PLAIN_PROMPT, "final": PLAIN_ANSWER},
            {"when": TOOL_PROMPT, "steps": [[dict(client.tool_call(work))]], "final": TOOL_ANSWER},
            {"when": SECOND_PROMPT, "final": SECOND_ANSWER},
            {"final": SIDE_ANSWER},
        ],
    }


def base_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A client's whole environment: a fresh HOME and PATH, nothing of the developer's (no
    OPENAI_*/ANTHROPIC_* variables, no proxies), telemetry and update checks off."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "TMPDIR": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
        "DO_NOT_TRACK": "1",
        "NO_UPDATE_NOTIFIER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "NODE_OPTIONS": "--no-warnings",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(extra or {})
    return env


# -- installs ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _install_lock(target: Path) -> Iterator[None]:
    """One install of `target` at a time (a test run and a recording may start together)."""
    CLIENTS_CACHE.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _stamped(target: Path, stamp: str) -> bool:
    done = target / ".installed"
    return done.exists() and done.read_text() == stamp


def _said(done: subprocess.CompletedProcess[str]) -> str:
    lines = (done.stdout + done.stderr).strip().splitlines()
    return " / ".join(line.strip() for line in lines[-4:])


def _install(target: Path, stamp: str, steps: Sequence[Sequence[str]], what: str) -> str | None:
    """Run the install steps into `target` (made afresh), stamp it; None, or why it failed."""
    shutil.rmtree(target, ignore_errors=True)
    for argv in steps:
        try:
            done = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(target, ignore_errors=True)
            return f"{what} failed: {exc}"
        if done.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            return f"{what} failed: {_said(done)}"
    (target / ".installed").write_text(stamp)
    return None


def _target(name: str, stamp: str) -> Path:
    # The folder's name carries a digest of the pins: a new pin makes a new folder and never
    # upgrades one in place.
    return CLIENTS_CACHE / f"{name}-{hashlib.sha256(stamp.encode()).hexdigest()[:10]}"


def install_pypi(name: str, requirements: Sequence[str], check: Sequence[str] = ()) -> Path | str:
    """The Python of a virtualenv under `.cache/clients/` with `requirements` (pinned) in it,
    made on first use; or why it could not be made (no registry: the test skips).

    uv (a test dependency) makes it: the same packages pip would install, in a tenth of the
    time; its downloads stay under `.cache/clients/uv`. `check` is run with that Python after
    the install (e.g. ["-c", "import llm"]) and must succeed, so a broken install is never
    stamped as done.
    """
    stamp = "\n".join(requirements)
    target = _target(name, stamp)
    python = target / "bin" / "python"
    uv = Path(sys.executable).parent / "uv"
    with _install_lock(target):
        if not _stamped(target, stamp):
            if not os.access(uv, os.X_OK):
                return f"uv is not installed beside {sys.executable} (make venv installs it)"
            cache = ["--cache-dir", str(CLIENTS_CACHE / "uv")]
            steps = [
                [str(uv), "venv", "--quiet", "--python", sys.executable, *cache, str(target)],
                [str(uv), "pip", "install", "--quiet", "--python", str(python), *cache,
                 *requirements],
            ]  # fmt: skip
            if check:
                steps.append([str(python), *check])
            failed = _install(target, stamp, steps, f"uv pip install {' '.join(requirements)}")
            if failed is not None:
                return failed
    return python


def install_npm(name: str, specs: Sequence[str], executable: str | None = None) -> Path | str:
    """The node_modules folder (or, with `executable`, that file under node_modules/.bin) of
    an npm install of `specs` (pinned) under `.cache/clients/`, made on first use; or why not."""
    stamp = "\n".join(specs)
    target = _target(name, stamp)
    modules = target / "node_modules"
    found = modules / ".bin" / executable if executable else modules
    npm = shutil.which("npm")
    with _install_lock(target):
        if not _stamped(target, stamp):
            if npm is None:
                return f"npm is not on PATH; it is needed to install {' '.join(specs)}"
            target.mkdir(parents=True, exist_ok=True)
            argv = [
                npm, "install", "--prefix", str(target), "--no-audit", "--no-fund", "--no-save",
                # Native binaries come as optional dependencies: a user's omit=optional must
                # not drop them. An unreachable registry gives a reason soon, not after backoff.
                "--include=optional", "--loglevel=error", "--fetch-retries=1",
                "--fetch-retry-maxtimeout=10000", *specs,
            ]  # fmt: skip
            mkdir = ["mkdir", "-p", str(target)]
            failed = _install(target, stamp, [mkdir, argv], f"npm install {' '.join(specs)}")
            if failed is not None:
                return failed
    return found if found.exists() else f"{found} is missing after the install"


# -- running -----------------------------------------------------------------------------------


def run_checked(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, what: str
) -> tuple[str, str]:
    """Run a client headless; its stdout and stderr, or CaseFailed with its output."""
    returncode, stdout, stderr = run_cli(argv, env=env, cwd=cwd, timeout=CASE_TIMEOUT_S)
    if returncode != 0:
        state = "killed at the timeout" if returncode is None else f"exit {returncode}"
        raise CaseFailed(f"{what}: {state}\nstdout: {stdout[-3000:]}\nstderr: {stderr[-3000:]}")
    return stdout, stderr


def run_driver(
    command: Sequence[str], case: str, run: Run, env: Mapping[str, str] | None = None
) -> str:
    """A library driver (drivers/*): one case; the answer it printed."""
    argv = [
        *command, "--case", case, "--base-url", run.url, "--key", run.key,
        "--model", run.model, "--work", str(run.work), "--state", str(run.state_file),
    ]  # fmt: skip
    stdout, _ = run_checked(argv, env or base_env(run.home), run.work, f"{command[-1]} {case}")
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        answer = json.loads(last)["answer"]
    except (ValueError, KeyError, TypeError):
        raise CaseFailed(f"{command[-1]} {case}: no answer line in {stdout[-2000:]!r}") from None
    if not isinstance(answer, str):
        raise CaseFailed(f"{command[-1]} {case}: answer is not text: {answer!r}")
    return answer
