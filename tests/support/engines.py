"""The engines the gateway's end-to-end suites run over: our simulator, and the real sglang-kt
server on this CPU (make engine-cpu). One parametrized fixture picks them
(tests/e2e/conftest.py `engine`); this module starts and describes them.

Which ones run: FLASHBOX_TEST_ENGINES, comma-separated (default `sim`); `make test-engine`
sets `sglang`. The real engine needs its virtualenv under .cache/engine-cpu (built by
`python -m scripts.engine_cpu --prepare-only`, which `make test-engine` runs first).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import procs
from bench.procs import REPO_ROOT, Proc, free_port, start_sim

ENGINES_ENV = "FLASHBOX_TEST_ENGINES"
KINDS = ("sim", "sglang")
# The real server's tiny model: hybrid (the default) or dense (make engine-cpu's choices).
MODEL_ENV = "ENGINE_CPU_MODEL"
# Start to healthy is ~15-25 s on a 2-core box; a loaded CI box may take several times that.
REAL_READY_TIMEOUT_S = 300.0


def selected_kinds(environ: Mapping[str, str] | None = None) -> list[str]:
    """The engine kinds this run covers, in KINDS order; ValueError for an unknown name."""
    env = os.environ if environ is None else environ
    names = [n.strip() for n in env.get(ENGINES_ENV, "sim").split(",") if n.strip()]
    unknown = sorted(set(names) - set(KINDS))
    if unknown:
        raise ValueError(f"{ENGINES_ENV}: unknown engine(s) {unknown}; choose from {KINDS}")
    return [kind for kind in KINDS if kind in names]


@dataclass
class EngineProc(Proc):
    """A real engine: sglang-kt runs a server process plus scheduler and detokenizer children,
    so it is started in its own process group and stopped as one."""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout)
        # Children that outlived the leader (they share its group).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        return self.popen.returncode


def real_engine_model() -> str:
    return os.environ.get(MODEL_ENV, "hybrid")


def spawn_real_engine(port: int | None = None, model: str | None = None) -> EngineProc:
    """`python -m scripts.engine_cpu` on a free port (or `port`); returns at once."""
    port = port or free_port()
    log = Path(tempfile.mkstemp(prefix="sglang-cpu-", suffix=".log")[1])
    argv = [
        sys.executable,
        "-m",
        "scripts.engine_cpu",
        "--model",
        model or real_engine_model(),
        "--port",
        str(port),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return EngineProc(popen=popen, port=port, log_path=log)


def wait_healthy(proc: Proc, timeout: float = REAL_READY_TIMEOUT_S) -> Proc:
    return procs.wait_healthy(proc, "the engine", timeout=timeout, poll_s=0.2, probe_timeout_s=2.0)


def start_real_engine(port: int | None = None, model: str | None = None) -> EngineProc:
    proc = spawn_real_engine(port, model)
    wait_healthy(proc)
    return proc


@dataclass
class Engine:
    """An engine under test and what the suites may expect of it."""

    kind: str
    proc: Proc
    # What /server_info and /model_info report (read once it is up).
    server_info: dict[str, Any] = field(default_factory=dict)
    model_info: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def is_sim(self) -> bool:
        return self.kind == "sim"

    @property
    def context_length(self) -> int:
        value = self.server_info.get("context_length")
        return value if isinstance(value, int) else 1 << 20

    @property
    def accepts_images(self) -> bool:
        return bool(self.model_info.get("has_image_understanding"))

    def steer(self, **sim: object) -> dict[str, object]:
        """extra_body that steers the simulator's answer; nothing for a real engine, whose
        tiny random model says what it says (the suites check the protocol, not content)."""
        return {"custom_params": {"sim": sim}} if self.is_sim else {}

    def metric(self, name: str) -> float:
        """Sum of an engine metric's samples (SGLang's `sglang:` names)."""
        text = httpx.get(self.url + "/metrics", timeout=5).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
                total += float(line.rsplit(" ", 1)[1])
        return total


def describe(kind: str, proc: Proc) -> Engine:
    engine = Engine(kind=kind, proc=proc)
    with contextlib.suppress(httpx.HTTPError, ValueError):
        engine.server_info = httpx.get(proc.url + "/server_info", timeout=10).json()
        engine.model_info = httpx.get(proc.url + "/model_info", timeout=10).json()
    return engine


def start_engine(kind: str, port: int | None = None) -> Engine:
    """A healthy engine of `kind` ("sim" or "sglang")."""
    if kind == "sim":
        # Launched as the launcher starts the real one (--stream-output).
        proc: Proc = start_sim(name="engine-under-test", as_launched=True, port=port)
        return describe(kind, proc)
    return describe(kind, start_real_engine(port))
