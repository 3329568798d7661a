"""Two gateway processes sharing routing state through a real redis-server, in front of three
simulator replicas: a session's turns alternating between the gateways keep their checkpoints
(the simulators' cached tokens say so), two gateways racing on one new session pin it once,
and a store killed mid-run costs no request and comes back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest
import redis

from bench.procs import RedisProc, start_redis
from tests.e2e.conftest import client_for, metric_sum
from tests.e2e.test_affinity import AFFINITY_ENV, SIM_ARGS, Session
from tests.support.procs import Proc, start_gateway, start_sim

RETRY_S = 0.2


def fleet_env(store: RedisProc) -> dict[str, str]:
    # A generous round-trip bound: this box is shared and loaded (the default is 5 ms).
    return {
        **AFFINITY_ENV,
        "FLASHBOX_STATE_URL": store.url,
        "FLASHBOX_STATE__TIMEOUT_S": "0.25",
        "FLASHBOX_STATE__RETRY_S": str(RETRY_S),
    }


@dataclass
class Fleet:
    store: RedisProc
    sims: list[Proc]
    gateways: list[Proc]

    def total(self, name: str, labels: dict[str, str] | None = None) -> float:
        return sum(metric_sum(g, name, labels) for g in self.gateways)


@pytest.fixture
def fleet(redis_server: RedisProc) -> Iterator[Fleet]:
    sims: list[Proc] = []
    gateways: list[Proc] = []
    try:
        sims.extend(start_sim(*SIM_ARGS, name=f"f{i}") for i in range(3))
        urls = [s.url for s in sims]
        gateways.extend(start_gateway(urls, env=fleet_env(redis_server)) for _ in range(2))
        yield Fleet(redis_server, sims, gateways)
    finally:
        for proc in gateways + sims:
            proc.stop()


def alternate(fleet: Fleet, sessions: list[Session], turns: int) -> None:
    """`turns` more turns of each session, each on the other gateway than its previous one."""
    clients = [client_for(g) for g in fleet.gateways]
    try:
        for _ in range(turns):
            for session in sessions:
                session.turn(clients[(session.index + len(session.turns)) % 2])
    finally:
        for client in clients:
            client.close()


def test_turns_alternating_between_gateways_keep_their_checkpoints(fleet: Fleet) -> None:
    sessions = [Session(700 + i) for i in range(6)]
    alternate(fleet, sessions, 4)
    for session in sessions:
        assert len({t.replica for t in session.turns}) == 1, session.turns
        for n in range(2, 5):
            assert session.hit(n), (n, session.turns)
    # Each gateway verified the turns it served against the other's last prompt tokens.
    for gateway in fleet.gateways:
        assert metric_sum(gateway, "flashbox_affinity_total", {"outcome": "hit"}) == 9
        assert metric_sum(gateway, "flashbox_affinity_total", {"outcome": "verified_miss"}) == 0
    assert fleet.total("flashbox_affinity_total", {"outcome": "new"}) == len(sessions)
    assert fleet.total("flashbox_state_errors_total") == 0


def both_first_turns(clients: list[openai.OpenAI], index: int) -> list[str]:
    """Session `index`'s first turn sent to both gateways at once; the replicas that served."""
    start = threading.Barrier(len(clients))
    served = [""] * len(clients)

    def send(i: int) -> None:
        session = Session(index)  # one each: Session.turn appends the reply to its messages
        start.wait()
        served[i] = session.turn(clients[i]).replica

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(served), served
    return served


def test_two_gateways_racing_on_a_new_session_pin_it_once(fleet: Fleet) -> None:
    sessions = [Session(800 + i) for i in range(5)]
    clients = [client_for(g) for g in fleet.gateways]
    try:
        for session in sessions:
            assert len(set(both_first_turns(clients, session.index))) == 1
    finally:
        for client in clients:
            client.close()
    # One claim won per session; the other gateway found the pin, or lost the claim to it.
    assert fleet.total("flashbox_state_claims_total", {"result": "won"}) == len(sessions)
    store = redis.Redis.from_url(fleet.store.url)
    try:
        assert len(store.keys("flashbox:pin:*")) == len(sessions)
        live = sum(store.zcard(key) for key in store.keys("flashbox:live:*"))
        assert live == len(sessions)
    finally:
        store.close()


def test_a_store_killed_mid_run_costs_no_request_and_sharing_resumes(fleet: Fleet) -> None:
    known = [Session(900 + i) for i in range(6)]
    alternate(fleet, known, 2)

    fleet.store.kill()
    # Every request is answered; sessions both gateways have seen keep hitting.
    alternate(fleet, known, 2)
    for session in known:
        assert session.hit(3)
        assert session.hit(4)
    # Sessions that start now are known only to the gateway that served each turn.
    newcomers = [Session(950 + i) for i in range(3)]
    alternate(fleet, newcomers, 2)
    assert fleet.total("flashbox_state_errors_total") > 0
    assert all(metric_sum(g, "flashbox_state_up") == 0 for g in fleet.gateways)

    back = start_redis(port=fleet.store.port)
    try:
        time.sleep(2 * RETRY_S)
        # The restarted store is empty: each gateway writes back the pins it knows, and a pin
        # two gateways made apart converges within two turns.
        everyone = known + newcomers
        alternate(fleet, everyone, 6)
        for session in everyone:
            n = len(session.turns)
            assert session.hit(n - 1), session.turns
            assert session.hit(n), session.turns
        assert all(metric_sum(g, "flashbox_state_up") == 1 for g in fleet.gateways)
    finally:
        back.stop()
    # Nothing was refused along the way (openai raises on any error answer).
    assert fleet.total("flashbox_requests_total", {"code": "200"}) == sum(
        len(s.turns) for s in everyone
    )
