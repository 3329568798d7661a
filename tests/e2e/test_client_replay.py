"""What the client matrix's clients sent, replayed through the gateway (fast suite).

tests/fixtures/clients/<client>/ holds every request one client of the matrix sent in its
three cases (scripts/record_client_matrix.py; tests/e2e/test_client_matrix.py runs the clients
themselves in `make test-cli`). Replayed in the order they came over the simulator, each must be
answered 2xx and routing must never count a checkpoint miss.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import sim_and_gateway
from tests.support.procs import Proc
from tests.support.replay import load_records, replay

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "clients"
KEY = "replay-key-0123456789abcdef"
RECORDED = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.is_dir() else []


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Proc, Proc]]:
    env = {"FLASHBOX_API_KEYS": KEY}
    yield from sim_and_gateway("--reasoning-tokens", "8", "--content-tokens", "16", env=env)


def test_every_matrix_client_has_recorded_requests() -> None:
    from tests.support.client_matrix import matrix_clients

    assert sorted(c.name for c in matrix_clients()) == RECORDED


@pytest.mark.parametrize("client", RECORDED)
def test_a_matrix_client_s_requests_are_served(stack: tuple[Proc, Proc], client: str) -> None:
    _, gateway = stack
    records = load_records(FIXTURES / client)
    assert records, f"no fixtures for {client}"
    failures, outcomes = replay(gateway.url, records, KEY)
    assert failures == []
    misses = {k: v for k, v in outcomes.items() if k[0] in ("verified_miss", "head_miss")}
    assert misses == {}, outcomes
