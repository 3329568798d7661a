"""In-process gateway over two fake engines: retries before the first byte, and /admin/*."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from gateway.app import create_app
from gateway.routing import Replica
from gateway.routing.rendezvous import ranked
from gateway.routing.session_key import session_key
from gateway.settings import Settings
from tests.gateway.conftest import chat_body
from tests.gateway.fake_engine import FakeEngine

A, B = "http://engine-a:30000", "http://engine-b:30000"


@asynccontextmanager
async def two_engines(
    broken: dict[str, int], **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, FakeEngine]]:
    """`broken`: host -> HTTP status its /generate answers (0: connection refused)."""
    engine = FakeEngine()

    async def handle(request: httpx.Request) -> httpx.Response:
        status = broken.get(request.url.host)
        if status is not None and request.url.path == "/generate":
            if status == 0:
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(status, json={"error": {"message": "no", "code": status}})
        return await engine.handle(request)

    settings = Settings(engines=[A, B], **overrides)
    app = create_app(settings, transport=httpx.MockTransport(handle))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client,
    ):
        yield client, engine


def metric(text: str, line: str) -> bool:
    return any(row.startswith(line) for row in text.splitlines())


def header_homed_on(host: str) -> str:
    """An x-session-id whose first rendezvous choice is `host`."""
    replicas = [Replica.from_url(A), Replica.from_url(B)]
    for i in range(100):
        key = session_key(f"s{i}", {}, [], [], None)
        if ranked(key, replicas)[0].name.startswith(host):
            return f"s{i}"
    raise AssertionError("no such key")


async def test_engine_503_5xx_and_refusal_are_retried_on_the_other_replica() -> None:
    for status in (503, 0, 500):
        async with two_engines({"engine-a": status}) as (client, engine):
            response = await client.post(
                "/v1/chat/completions",
                json=chat_body(stream=True),
                headers={"x-session-id": header_homed_on("engine-a")},
            )
            assert response.status_code == 200, (status, response.text)
            assert response.headers["x-flashbox-replica"] == "engine-b:30000"
            assert len(engine.generates) == 1
            text = (await client.get("/metrics")).text
            assert metric(text, "flashbox_retries_total 1.0")
            assert metric(text, 'flashbox_affinity_total{lineage="main",outcome="failover"} 1.0')


async def test_a_client_error_is_not_retried() -> None:
    async with two_engines({"engine-a": 400, "engine-b": 400}) as (client, _):
        response = await client.post("/v1/chat/completions", json=chat_body())
        assert response.status_code == 400
        text = (await client.get("/metrics")).text
        assert metric(text, "flashbox_retries_total 0.0")


async def test_retries_are_bounded() -> None:
    async with two_engines({"engine-a": 503, "engine-b": 503}) as (client, _):
        response = await client.post("/v1/chat/completions", json=chat_body())
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "service_unavailable"
        text = (await client.get("/metrics")).text
        assert metric(text, "flashbox_retries_total 1.0")


async def test_admin_needs_an_admin_key() -> None:
    async with two_engines({}) as (client, _):
        disabled = await client.get("/admin/replicas")
        assert disabled.status_code == 403
        assert disabled.json()["error"]["code"] == "admin_disabled"
    async with two_engines({}, routing={"admin_api_keys": ["adm-1"]}, api_keys=["user-1"]) as (
        client,
        _,
    ):
        assert (await client.get("/admin/replicas")).status_code == 401
        wrong = await client.get("/admin/replicas", headers={"authorization": "Bearer user-1"})
        assert wrong.status_code == 403
        assert wrong.json()["error"]["type"] == "permission_error"


async def test_admin_lists_and_drains_replicas() -> None:
    admin = {"authorization": "Bearer adm-1"}
    async with two_engines({}, routing={"admin_api_keys": ["adm-1"]}) as (client, _):
        await client.post("/v1/chat/completions", json=chat_body(), headers={"x-session-id": "s1"})
        listed = (await client.get("/admin/replicas", headers=admin)).json()["data"]
        assert [r["name"] for r in listed] == ["engine-a:30000", "engine-b:30000"]
        assert sum(r["live_sessions"] for r in listed) == 1
        assert all(r["healthy"] and r["in_flight"] == 0 for r in listed)
        assert listed[0]["checkpoint_slots"] == 192  # the fake reports no /server_info
        home = next(r["name"] for r in listed if r["live_sessions"] == 1)
        drained = await client.post(f"/admin/replicas/{home}/drain", headers=admin)
        assert drained.json()["draining"] is True
        moved = await client.post(
            "/v1/chat/completions", json=chat_body(), headers={"x-session-id": "s1"}
        )
        assert moved.headers["x-flashbox-replica"] != home
        missing = await client.post("/admin/replicas/nope/drain", headers=admin)
        assert missing.status_code == 404
        back = await client.post(f"/admin/replicas/{home}/undrain", headers=admin)
        assert back.json()["draining"] is False
