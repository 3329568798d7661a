"""`make demo`: two simulated engine replicas and the gateway on loopback; Ctrl-C stops all.

Settings come from the environment: FLASHBOX_PORT (gateway, default 8080),
DEMO_TIME_SCALE (simulated hardware speed, default 0.1 = ten times faster than the reference
host, so answers stream visibly but quickly), DEMO_SIM_PORTS (default 30001,30002).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import FrameType

import httpx


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: process exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url}: not healthy after {timeout:.0f}s")


def main() -> int:
    scale = os.environ.get("DEMO_TIME_SCALE", "0.1")
    gw_port = os.environ.get("FLASHBOX_PORT", "8080")
    sim_ports = os.environ.get("DEMO_SIM_PORTS", "30001,30002").split(",")
    procs: list[subprocess.Popen[bytes]] = []

    def stop_all(*_: object) -> None:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_all()
        raise SystemExit(0)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        engines = []
        for i, port in enumerate(sim_ports):
            name = f"sim-{chr(ord('a') + i)}"
            argv = [
                sys.executable,
                "-m",
                "engine.sim",
                "--host",
                "127.0.0.1",
                "--port",
                port,
                "--time-scale",
                scale,
                "--name",
                name,
            ]
            procs.append(subprocess.Popen(argv))
            engines.append(f"http://127.0.0.1:{port}")
        for url, proc in zip(engines, procs, strict=True):
            _wait_healthy(url, proc)
        env = {
            **os.environ,
            "FLASHBOX_ENGINES": ",".join(engines),
            "FLASHBOX_HOST": "127.0.0.1",
            "FLASHBOX_PORT": gw_port,
        }
        gateway = subprocess.Popen([sys.executable, "-m", "gateway"], env=env)
        procs.append(gateway)
        base = f"http://127.0.0.1:{gw_port}"
        _wait_healthy(base, gateway)
        print(
            f"""
flashbox demo is up (simulated hardware at time scale {scale}).
  gateway        {base}/v1   (OpenAI-compatible; no API key needed in the demo)
  metrics        {base}/metrics
  engine replicas {", ".join(engines)}

Try it:
  curl -N {base}/v1/chat/completions -H 'content-type: application/json' \\
    -H 'x-session-id: demo-1' \\
    -d '{{"model": "glm-5.3-flash", "stream": true, "max_tokens": 64,
         "messages": [{{"role": "user", "content": "Hello!"}}]}}'

Ctrl-C stops everything.""",
            flush=True,
        )
        while all(proc.poll() is None for proc in procs):
            time.sleep(0.5)
        print("a demo process exited; stopping the rest", file=sys.stderr)
        return 1
    finally:
        stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
