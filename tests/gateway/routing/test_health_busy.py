"""Health probing under long prefills: a 503 from a replica we have requests open on is 'busy'."""

from __future__ import annotations

import httpx

from gateway.routing import Replica
from gateway.routing.health import HealthProber
from gateway.settings import HealthSettings
from tests.support.clock import Clock


async def test_a_busy_replica_stays_up_within_the_grace_then_goes_down() -> None:
    replica = Replica.from_url("http://busy:1")
    replica.healthy = True
    clock = Clock(100.0)
    answer = httpx.MockTransport(lambda request: httpx.Response(503))
    async with httpx.AsyncClient(transport=answer) as client:
        prober = HealthProber(
            [replica],
            client,
            HealthSettings(unhealthy_after=2),
            lambda r: None,
            busy_grace_s=60.0,
            clock=clock,
        )
        replica.in_flight = 1
        for _ in range(5):
            await prober.probe_all()
            clock.now += 10.0
        assert replica.healthy
        clock.now += 30.0  # past the grace: 503s count again
        await prober.probe_all()
        await prober.probe_all()
        assert not replica.healthy


async def test_an_idle_replica_answering_503_goes_down() -> None:
    replica = Replica.from_url("http://idle:1")
    replica.healthy = True
    answer = httpx.MockTransport(lambda request: httpx.Response(503))
    async with httpx.AsyncClient(transport=answer) as client:
        prober = HealthProber(
            [replica], client, HealthSettings(unhealthy_after=2), lambda r: None, busy_grace_s=60.0
        )
        await prober.probe_all()
        assert replica.healthy
        await prober.probe_all()
        assert not replica.healthy


async def test_server_info_sizes_the_replica() -> None:
    replica = Replica.from_url("http://info:1")

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/server_info":
            info = {"max_mamba_cache_size": 64, "mamba_track_interval": 128}
            return httpx.Response(200, json={**info, "max_running_requests": 8})
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        prober = HealthProber(
            [replica], client, HealthSettings(), lambda r: None, server_info_path="/server_info"
        )
        await prober.probe_all()
    assert replica.healthy
    assert (replica.checkpoint_slots, replica.track_interval) == (64, 128)
    assert replica.max_running_requests == 8


async def test_model_info_tells_a_text_only_model() -> None:
    """sglang-kt's /model_info says whether the model sees images; without vision it takes
    `image_data` and ignores it, so the gateway has to know (tests/e2e/test_engine_protocol)."""
    seen: dict[str, bool | None] = {}
    for vision in (False, True, None):
        replica = Replica.from_url(f"http://vision-{vision}:1")

        def answer(request: httpx.Request, vision: bool | None = vision) -> httpx.Response:
            if request.url.path == "/model_info":
                return httpx.Response(200, json={"has_image_understanding": vision})
            return httpx.Response(200, json={})

        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            prober = HealthProber(
                [replica],
                client,
                HealthSettings(),
                lambda r: None,
                server_info_path="/server_info",
                model_info_path="/model_info",
            )
            await prober.probe_all()
        seen[str(vision)] = replica.accepts_images
    assert seen == {"False": False, "True": True, "None": None}
