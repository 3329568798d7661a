"""Health thresholds and probing of replicas."""

from __future__ import annotations

import httpx

from gateway.routing import Replica
from gateway.routing.health import HealthProber
from gateway.settings import HealthSettings


def test_health_thresholds() -> None:
    replica = Replica.from_url("http://a:1")
    changes: list[bool] = []
    prober = HealthProber(
        [replica],
        httpx.AsyncClient(),
        HealthSettings(unhealthy_after=3, healthy_after=2),
        lambda r: changes.append(r.healthy),
    )
    prober.record(replica, True)
    assert not replica.healthy
    prober.record(replica, True)
    assert replica.healthy
    # A 503 (long CPU prefill) needs three failures in a row to mark the replica down ...
    prober.record(replica, False)
    prober.record(replica, False)
    assert replica.healthy
    prober.record(replica, False)
    assert not replica.healthy
    # ... a refused connection marks it down at once.
    prober.record(replica, True)
    prober.record(replica, True)
    prober.record(replica, False, refused=True)
    assert not replica.healthy
    assert len(changes) == 8


async def test_probe_all_against_a_transport() -> None:
    replicas = [Replica.from_url("http://up:1"), Replica.from_url("http://down:2")]

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        prober = HealthProber(replicas, client, HealthSettings(), lambda r: None)
        await prober.probe_all()
    assert [r.healthy for r in replicas] == [True, False]
