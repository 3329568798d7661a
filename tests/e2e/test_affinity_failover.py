"""Replicas failing and joining under session affinity, with real simulator processes."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.e2e.conftest import MODEL, client_for, metric_sum, wait_for
from tests.e2e.test_affinity import AFFINITY_ENV, SIM_ARGS, Session, replicas_info
from tests.support.procs import Proc, free_port, start_gateway, start_process, start_sim

STALL = {"custom_params": {"sim": {"fault": "stall:3", "reasoning_tokens": 0, "tool_calls": 0}}}


def by_replica(sessions: list[Session]) -> dict[str, list[Session]]:
    groups: dict[str, list[Session]] = {}
    for session in sessions:
        groups.setdefault(session.turns[-1].replica, []).append(session)
    return groups


def test_a_replica_killed_mid_run() -> None:
    sims = [start_sim(*SIM_ARGS, name=f"k{i}") for i in range(3)]
    gateway = start_gateway([s.url for s in sims], env=AFFINITY_ENV)
    procs: dict[str, Proc] = {f"127.0.0.1:{s.port}": s for s in sims}
    try:
        sessions = [Session(400 + i) for i in range(9)]
        with client_for(gateway) as client:
            for _ in range(2):
                for session in sessions:
                    session.turn(client)
            groups = by_replica(sessions)
            victim_name = max(groups, key=lambda name: len(groups[name]))
            victims = groups[victim_name]
            # A stream in flight on the victim: it stalls after a few tokens, then the
            # replica dies under it.
            stream = client.chat.completions.create(
                model=MODEL,
                messages=victims[0].messages,
                max_tokens=64,
                stream=True,
                extra_headers={"x-session-id": f"e2e-{victims[0].index}"},
                extra_body=STALL,
            )
            assert next(iter(stream)).choices is not None
            procs[victim_name].kill()
            with pytest.raises(openai.APIError):
                for _ in stream:
                    pass
            # The next turns of its sessions succeed elsewhere; the others stay and hit.
            for session in sessions:
                session.turn(client)
        for session in victims:
            assert session.turns[-1].replica != victim_name
        for name, group in groups.items():
            if name == victim_name:
                continue
            for session in group:
                assert session.turns[-1].replica == name
                assert session.hit(3), session.turns
        assert metric_sum(gateway, "flashbox_affinity_total", {"outcome": "failover"}) == len(
            victims
        )
        assert metric_sum(gateway, "flashbox_replica_up", {"replica": victim_name}) == 0
    finally:
        gateway.stop()
        for sim in sims:
            sim.stop()


def test_a_replica_added_moves_no_pin() -> None:
    sims = [start_sim(*SIM_ARGS, name=f"a{i}") for i in range(2)]
    late_port = free_port()
    late_name = f"127.0.0.1:{late_port}"
    # The third replica is configured but not up yet: it joins when it starts answering.
    urls = [s.url for s in sims] + [f"http://{late_name}"]
    gateway = start_gateway(urls, env=AFFINITY_ENV)
    late: Proc | None = None
    try:
        sessions = [Session(500 + i) for i in range(6)]
        with client_for(gateway) as client:
            for session in sessions:
                session.turn(client)
            args = ["--host", "127.0.0.1", "--port", "{port}", "--time-scale", "0.001", *SIM_ARGS]
            late = start_process("engine.sim", args, port=late_port)
            assert wait_for(lambda: replicas_info(gateway)[late_name]["healthy"])
            for session in sessions:
                session.turn(client)
            # More newcomers than the first two replicas' budgets (2 x 14) hold with the first
            # six sessions: the new replica must get some, whatever rendezvous ranks (the ports,
            # and so the replica names, differ from run to run).
            newcomers = [Session(600 + i) for i in range(24)]
            for session in newcomers:
                session.turn(client)
        for session in sessions:
            assert session.turns[0].replica == session.turns[1].replica != late_name
            assert session.hit(2)
        assert any(s.turns[0].replica == late_name for s in newcomers)
        assert httpx.get(gateway.url + "/ready").status_code == 200
    finally:
        gateway.stop()
        for sim in sims:
            sim.stop()
        if late is not None:
            late.stop()
