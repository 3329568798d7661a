"""The routers the affinity benchmarks compare, started in front of simulator replicas.

- `flashbox`, `consistent_hash`, `round_robin`: this working tree's gateway with that
  `routing.policy` (`flashbox:no_spill`: flashbox with spilling off, an ablation);
- `today`: the gateway of an earlier git revision, run from a `git worktree` in a temporary
  directory (today_worktree) with routing.policy flashbox;
- `smg:<policy>`: the SGLang model gateway (sglang-router), which talks to the simulators'
  own /v1/chat/completions; `smg:manual` routes by the x-smg-routing-key header.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench.procs import REPO_ROOT, Proc, free_port, start_gateway, start_process

TODAY = "today"
# How long a gateway or smg may take to answer its health check after starting.
READY_TIMEOUT_S = 60.0


def gateway_env(policy_name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The gateway's environment for a router name ("flashbox", "flashbox:no_spill", ...)."""
    policy, _, variant = policy_name.partition(":")
    env = {
        "FLASHBOX_ROUTING__POLICY": policy,
        "FLASHBOX_LIMITS__MAX_BODY_BYTES": str(64 * 1024 * 1024),
        "FLASHBOX_API_KEYS": "",
        **(extra or {}),
    }
    if variant == "no_spill":
        env["FLASHBOX_ROUTING__SPILL"] = "false"
    return env


def start_gateway_in(root: Path, engines: list[str], env: Mapping[str, str]) -> Proc:
    """`python -m gateway` from another checkout (`root`): its own code and config/."""
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="gateway-today-", suffix=".log")[1])
    full_env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        # The checkout's packages first: `-m` puts the working directory first on sys.path.
        "PYTHONPATH": str(root),
        "FLASHBOX_ENGINES": ",".join(engines),
        "FLASHBOX_HOST": "127.0.0.1",
        "FLASHBOX_PORT": str(port),
        **env,
    }
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "gateway"],
            cwd=root,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    proc = Proc(popen=popen, port=port, log_path=log)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"gateway at {root} exited with {popen.returncode}:\n{proc.log()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(proc.url + "/health", timeout=1.0).status_code == 200:
                return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"gateway at {root} not healthy after {READY_TIMEOUT_S}s:\n{proc.log()}")


@contextmanager
def today_worktree(rev: str) -> Iterator[Path]:
    """A detached `git worktree` of `rev` in a new temporary directory, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="flashbox-today-"))
    git = ["git", "-C", str(REPO_ROOT), "worktree"]
    added = subprocess.run(
        [*git, "add", "--detach", str(path), rev], capture_output=True, text=True, check=False
    )
    if added.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        raise RuntimeError(f"git worktree add {rev} failed: {added.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run([*git, "remove", "--force", str(path)], capture_output=True, check=False)
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def router(
    name: str,
    urls: list[str],
    *,
    today_root: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[Proc]:
    """The router `name` in front of `urls`, stopped on exit; `env` is added for gateways."""
    if name.startswith("smg:"):
        policy = name.removeprefix("smg:")
        args = ["launch", "--host", "127.0.0.1", "--port", "{port}", "--policy", policy]
        args += ["--worker-urls", *urls, "--log-level", "warn"]
        proc = start_process(
            "sglang_router", args, health_path="/health", ready_timeout=READY_TIMEOUT_S
        )
    elif name == TODAY:
        if today_root is None:
            raise ValueError("the 'today' router needs a checkout of the baseline revision")
        proc = start_gateway_in(today_root, urls, gateway_env("flashbox", env))
    else:
        proc = start_gateway(urls, env=gateway_env(name, env))
    try:
        yield proc
    finally:
        proc.stop()


def smg_manual_key(name: str) -> Callable[[str], Mapping[str, str]] | None:
    """smg's manual policy routes by a header; the others need none."""
    if name == "smg:manual":
        return lambda key: {"x-smg-routing-key": key}
    return None


def wait_ready(proc: Proc, timeout: float = READY_TIMEOUT_S) -> None:
    """smg answers /health before its workers are registered; wait until it routes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            response = httpx.get(proc.url + "/v1/models", timeout=2.0)
            if response.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"router not ready after {timeout}s:\n{proc.log()}")


def evictions(sim: Proc) -> int:
    """Checkpoints the replica's pool evicted while the sessions ran."""
    info = httpx.get(sim.url + "/server_info", timeout=10.0).json()
    return int(info.get("checkpoint_evictions", 0))


def routing_lines(text: str) -> list[str]:
    """The gateway's placement log (spills, placements over budget, verified misses, heads
    warmed)."""
    marks = ("spill:", "over budget:", "verified miss", "warmed on")
    return [line for line in text.splitlines() if any(m in line for m in marks)]


def sim_args(
    slots: int, track_interval: int, max_running: int, max_queued: int, schedule_policy: str
) -> list[str]:
    """A simulator replica's flags for the affinity benchmarks."""
    return [
        "--checkpoint-slots",
        str(slots),
        "--track-interval",
        str(track_interval),
        "--max-running-requests",
        str(max_running),
        # Every session at once: the default queue bound would refuse some.
        "--max-queued-requests",
        str(max(4096, max_queued)),
        "--schedule-policy",
        schedule_policy,
    ]
