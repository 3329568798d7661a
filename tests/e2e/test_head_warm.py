"""Head warming through real simulators and the gateway (gateway/routing/warm.py): once a
session restores a project's prompt head, the gateway prefills the head on the other replicas
(`max_new_tokens` 0 with the head declared), and a new session that cannot go to the replica
that saved it first still restores it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bench.workload import synthetic_text
from tests.e2e.conftest import client_for, metric_sum, wait_for
from tests.e2e.test_lineages import ADMIN, ENV, TOOLS, TRACK, ChatConversation, affinity
from tests.support.procs import Proc, sims_behind_gateway


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[list[Proc], Proc]]:
    env = {**ENV, "FLASHBOX_ROUTING__HEAD_WARM_CHECK_S": "0.05"}
    with sims_behind_gateway("warm", env) as procs:
        yield procs


def heads_saved(sim: Proc) -> float:
    return metric_sum(sim, "flashbox_sim_head_checkpoints_saved_total")


def test_a_restored_head_is_warmed_on_the_other_replicas_and_restored_there(
    stack: tuple[list[Proc], Proc],
) -> None:
    sims, gateway = stack
    system = "You are Claude Code in project W. " + synthetic_text(2400, seed=21)
    with client_for(gateway) as client:
        ChatConversation("warm-1", system, "task one", TOOLS).turn(client)
        _, _, saver = ChatConversation("warm-2", system, "task two", TOOLS).turn(client)
        # Nothing is warmed before a head was restored: the engine may not keep heads.
        assert metric_sum(gateway, "flashbox_head_warms_total") == 0
        _, _, replica = ChatConversation("warm-3", system, "task three", TOOLS).turn(client)
        assert replica == saver
        assert affinity(gateway, "head_hit", "main") == 1
        warmed = {"outcome": "saved"}
        assert wait_for(lambda: metric_sum(gateway, "flashbox_head_warms_total", warmed) == 2)
        assert metric_sum(gateway, "flashbox_head_warms_total", {"outcome": "failed"}) == 0
        # Each replica saved the head once: the saver for the second session, the others for
        # the warm.
        assert [heads_saved(sim) for sim in sims] == [1, 1, 1]
        # The replica that saved it first takes no new work; the next session still restores
        # the head, where it was warmed.
        drained = httpx.post(f"{gateway.url}/admin/replicas/{saver}/drain", headers=ADMIN)
        assert drained.status_code == 200
        prompt, cached, elsewhere = ChatConversation("warm-4", system, "task 4", TOOLS).turn(client)
    assert elsewhere != saver
    assert cached >= (prompt - 200) // TRACK * TRACK - TRACK > 0
    assert affinity(gateway, "head_hit", "main") == 2
    assert metric_sum(gateway, "flashbox_head_warms_total", warmed) == 2
