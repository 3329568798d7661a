"""Start real processes on loopback for tests and benchmarks: simulator, gateway, redis-server...

Each process gets a free port, its output goes to a log file that the failure message
quotes, and it is stopped (SIGTERM, then SIGKILL) when the test is done.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Proc:
    """A running child process serving HTTP on 127.0.0.1:port."""

    popen: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout)
        return self.popen.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


def start_process(
    module: str,
    args: Sequence[str] = (),
    *,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    health_path: str = "/health",
    ready_timeout: float = 30.0,
) -> Proc:
    """Run `python -m module args...` and wait until GET health_path answers 200.

    `{port}` in args is replaced by the chosen port.
    """
    port = port or free_port()
    log = Path(tempfile.mkstemp(prefix=f"{module.replace('.', '_')}-", suffix=".log")[1])
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    argv = [sys.executable, "-m", module, *(a.replace("{port}", str(port)) for a in args)]
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT
        )
    proc = Proc(popen=popen, port=port, log_path=log)
    return wait_healthy(proc, module, health_path=health_path, timeout=ready_timeout)


def wait_healthy(
    proc: Proc,
    name: str,
    *,
    health_path: str = "/health",
    timeout: float = 30.0,
    poll_s: float = 0.05,
    probe_timeout_s: float = 1.0,
) -> Proc:
    """`proc` once GET health_path answers 200; killed, with its log in the error, if it
    exits or is not healthy within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{name} exited with {proc.popen.returncode}:\n{proc.log()}")
        with contextlib.suppress(httpx.HTTPError):
            response = httpx.get(proc.url + health_path, timeout=probe_timeout_s)
            if response.status_code == 200:
                return proc
        time.sleep(poll_s)
    proc.kill()
    raise RuntimeError(f"{name} not healthy after {timeout:g}s:\n{proc.log()}")


@contextlib.contextmanager
def running(
    module: str,
    args: Sequence[str] = (),
    **kwargs: object,
) -> Iterator[Proc]:
    proc = start_process(module, args, **kwargs)  # type: ignore[arg-type]
    try:
        yield proc
    finally:
        proc.stop()


def start_sim(
    *extra: str,
    name: str = "sim",
    time_scale: float = 0.001,
    as_launched: bool = False,
    port: int | None = None,
) -> Proc:
    """A simulated engine replica (contract: DESIGN.md). `as_launched` adds the flags the
    engine launcher sets that the simulator models (--stream-output); without it the
    simulator streams as SGLang does by default."""
    flags = ["--stream-output"] if as_launched else []
    return start_process(
        "engine.sim",
        [
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--time-scale",
            str(time_scale),
            "--name",
            name,
            *flags,
            *extra,
        ],
        port=port,
    )


def start_gateway(engines: Sequence[str], env: Mapping[str, str] | None = None) -> Proc:
    """The gateway in front of the given engine base URLs (contract: DESIGN.md)."""
    port = free_port()
    gw_env = {
        "FLASHBOX_ENGINES": ",".join(engines),
        "FLASHBOX_HOST": "127.0.0.1",
        "FLASHBOX_PORT": str(port),
        **(env or {}),
    }
    return start_process("gateway", port=port, env=gw_env)


@dataclass
class RedisProc(Proc):
    """A redis-server (the protocol Valkey speaks) on 127.0.0.1:port, nothing persisted."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def redis_server_binary() -> str | None:
    """valkey-server or redis-server on PATH (Debian's redis-server package: Makefile DEBS)."""
    return shutil.which("valkey-server") or shutil.which("redis-server")


def start_redis(port: int | None = None, ready_timeout: float = 10.0) -> RedisProc:
    """A fresh store on loopback; `port` to restart one where it was (its data is gone)."""
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError("no valkey-server or redis-server (apt-get install redis-server)")
    port = port or free_port()
    log = Path(tempfile.mkstemp(prefix="redis-", suffix=".log")[1])
    argv = [
        binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
        "--protected-mode", "no", "--dir", tempfile.gettempdir(),
    ]  # fmt: skip
    with log.open("wb") as out:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    proc = RedisProc(popen=popen, port=port, log_path=log)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"redis-server exited with {popen.returncode}:\n{proc.log()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5) as s:
            s.sendall(b"PING\r\n")
            if s.recv(16).startswith(b"+PONG"):
                return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"redis-server not answering after {ready_timeout}s:\n{proc.log()}")


def metric_samples(url: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called `name` on `url`/metrics, read with
    prometheus_client's own text parser."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]
