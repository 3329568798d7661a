"""Popular agents and SDKs, installed as users install them, through the gateway (`make
test-cli`, which CI runs; a client whose registry cannot be reached is skipped with the reason).

Each client (tests/support/client_matrix/) runs headless with a throwaway HOME against the
faces it uses, over the scripted simulator: a plain turn, a tool round trip (the model calls the
client's own read tool; the client runs it and sends the result back), and the tool
conversation continued. Asserted: every request it sent was answered 2xx, each case's answer is
the scripted one, the tool's result and then the whole conversation came back to the gateway,
the faces it used are the ones the README says, and routing never missed a checkpoint. The fast
suite replays what they sent (tests/e2e/test_client_replay.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.client_matrix import client, matrix_clients
from tests.support.client_matrix.base import CASE_TIMEOUT_S, INSTALL_TIMEOUT_S
from tests.support.client_matrix.runner import run_matrix

pytestmark = [pytest.mark.slow, pytest.mark.timeout(INSTALL_TIMEOUT_S + 4 * CASE_TIMEOUT_S)]


@pytest.mark.parametrize("name", [c.name for c in matrix_clients()])
def test_the_client_works_as_it_comes(name: str, tmp_path: Path) -> None:
    found = client(name)
    installed = found.install()
    if isinstance(installed, str):
        pytest.skip(installed)
    report = run_matrix(found, installed, tmp_path)
    assert report.problems() == [], [e.path for e in report.exchanges]
    print(f"{name}: {len(report.exchanges)} requests, answers {report.answers}")
