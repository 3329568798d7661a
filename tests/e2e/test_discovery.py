"""Engines found by DNS, with real processes: a DNS server on loopback (in this process) answers
for a test name, simulators listen on 127.0.0.2 and 127.0.0.3 (Linux routes all of 127/8 to
lo) on one port, and the gateway follows the name's answer without a restart."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import client_for, metric_sum, wait_for
from tests.e2e.test_affinity import AFFINITY_ENV, SIM_ARGS, Session, replicas_info
from tests.support.dns_server import Zone, dns_server
from tests.support.procs import REPO_ROOT, Proc, start_gateway

NAME = "engines.flashbox.test"
HOSTS = ("127.0.0.2", "127.0.0.3")


def port_free_everywhere() -> int:
    """One port free on every loopback address (the engines share it, as pods do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        port: int = sock.getsockname()[1]
        return port


def start_sim_on(host: str, port: int, name: str) -> Proc:
    """A simulator listening on `host` (bench.procs' helpers listen on 127.0.0.1 only)."""
    log = Path(tempfile.mkstemp(prefix=f"sim-{name}-", suffix=".log")[1])
    argv = [sys.executable, "-m", "engine.sim", "--host", host, "--port", str(port)]
    argv += ["--time-scale", "0.001", "--name", name, *SIM_ARGS]
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    proc = Proc(popen=popen, port=port, log_path=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"simulator on {host} exited:\n{proc.log()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://{host}:{port}/health", timeout=1).status_code == 200:
                return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"simulator on {host} not healthy:\n{proc.log()}")


def second_healthy(gateway: Proc, name: str) -> bool:
    return bool(replicas_info(gateway).get(name, {}).get("healthy"))


@pytest.fixture
def sims() -> Iterator[tuple[int, list[Proc]]]:
    port = port_free_everywhere()
    procs: list[Proc] = []
    try:
        for i, host in enumerate(HOSTS):
            procs.append(start_sim_on(host, port, f"d{i}"))
        yield port, procs
    finally:
        for proc in procs:
            proc.stop()


def test_replicas_follow_the_dns_answer(sims: tuple[int, list[Proc]]) -> None:
    port, _ = sims
    first, second = (f"{host}:{port}" for host in HOSTS)
    zone = Zone()
    zone.set(NAME, [HOSTS[0]])
    with dns_server(zone) as (dns_host, dns_port):
        env = {
            **AFFINITY_ENV,
            "FLASHBOX_DISCOVERY__DNS_NAME": NAME,
            "FLASHBOX_DISCOVERY__NAMESERVER": f"{dns_host}:{dns_port}",
            "FLASHBOX_DISCOVERY__PORT": str(port),
            "FLASHBOX_DISCOVERY__INTERVAL_S": "0.2",
            "FLASHBOX_DISCOVERY__TIMEOUT_S": "1",
        }
        gateway = start_gateway([], env=env)
        try:
            assert wait_for(lambda: httpx.get(gateway.url + "/ready").status_code == 200)
            assert list(replicas_info(gateway)) == [first]
            early = [Session(700 + i) for i in range(3)]
            with client_for(gateway) as client:
                for session in early:
                    assert session.turn(client).replica == first

                # A second engine appears in DNS: new sessions reach it, no pin moves.
                zone.set(NAME, HOSTS)
                assert wait_for(lambda: second_healthy(gateway, second))
                late = [Session(800 + i) for i in range(3)]
                for session in late:
                    session.turn(client)
                assert any(s.turns[0].replica == second for s in late)
                for session in early:
                    assert session.turn(client).replica == first
                    assert session.hit(2)

                # The first leaves DNS (its engine still runs): its sessions fail over to the
                # second and are served; the second's sessions stay and hit.
                on_second = [s for s in late if s.turns[0].replica == second]
                moved = early + [s for s in late if s.turns[0].replica == first]
                zone.set(NAME, [HOSTS[1]])
                assert wait_for(lambda: not replicas_info(gateway)[first]["healthy"])
                for session in early + late:
                    assert session.turn(client).replica == second
            for session in on_second:
                assert session.hit(len(session.turns))
            failovers = metric_sum(gateway, "flashbox_affinity_total", {"outcome": "failover"})
            assert failovers == len(moved)
            assert metric_sum(gateway, "flashbox_discovery_replicas") == 1
            assert metric_sum(gateway, "flashbox_discovery_errors_total") == 0
            assert httpx.get(gateway.url + "/ready").status_code == 200
            log = gateway.log()
            assert f"replica {second} joined" in log
            assert f"replica {first} left" in log
        finally:
            gateway.stop()
