"""The gateway app in-process (lifespan included) against a FakeEngine transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.media.addresses import HostResolver
from gateway.settings import Settings
from tests.gateway.fake_engine import FakeEngine
from tests.support.idle import assert_idle

ENGINE = "http://engine-a:30000"
MODEL = "glm-5.3-flash"

GatewayFactory = Callable[..., Any]


@asynccontextmanager
async def gateway_client(
    engine: FakeEngine,
    *,
    media_transport: httpx.AsyncBaseTransport | None = None,
    media_resolve_host: HostResolver | None = None,
    **overrides: Any,
) -> AsyncIterator[httpx.AsyncClient]:
    """`media_transport`, `media_resolve_host`: where image URL fetches go (no network)."""
    settings = Settings(engines=[ENGINE], **overrides)
    app = create_app(
        settings,
        transport=engine.transport(),
        media_transport=media_transport,
        media_resolve_host=media_resolve_host,
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client,
    ):
        yield client
        # Whatever the test did, every request gave back what it took (tests/support/idle.py).
        await assert_idle(app.state.flashbox)


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
async def client(engine: FakeEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway_client(engine) as c:
        yield c


def chat_body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}
