"""A request cancelled at each await point of its path gives back everything it took.

The app is driven as a server drives it (raw ASGI), over the production connection pool with
the FakeEngine beneath it (gateway.upstream.memory). For each face, streamed and not, the
client leaves (`http.disconnect`, as uvicorn reports it) or the server cancels the request's
task (shutdown) after k turns of the event loop, for every k until the request finishes first;
and at a few wall-clock points inside the engine's first-event wait, where the loop only
waits. After each: nothing is held (tests/support/idle.py), and the next request is served.
The same sweep runs with the fleet's store (a real redis-server) under routing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from bench.procs import redis_server_binary, start_redis
from gateway.app import GatewayApp, create_app
from gateway.settings import Settings
from tests.gateway.conftest import ENGINE, MODEL
from tests.gateway.fake_engine import FakeEngine, Script
from tests.support.idle import assert_idle

FACES: dict[str, tuple[str, Callable[[bool], dict[str, Any]]]] = {
    "chat": (
        "/v1/chat/completions",
        lambda stream: {
            "model": MODEL, "stream": stream, "messages": [{"role": "user", "content": "hi"}],
        },
    ),
    "messages": (
        "/v1/messages",
        lambda stream: {
            "model": MODEL, "stream": stream, "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
        },
    ),
    "responses": (
        "/v1/responses",
        lambda stream: {"model": MODEL, "stream": stream, "input": "hi", "store": True},
    ),
}  # fmt: skip
# Wall-clock points (s) inside a 0.3 s first-event wait, after the loop's own turns ran out.
TIMED_POINTS = (0.005, 0.05, 0.15, 0.35)
# The sweep ends once the request finished before its cancel this many k in a row.
DONE_IN_A_ROW = 3
MAX_TURNS = 400
# With a real store: steps of STORE_STEP_S, at most this many.
MAX_STORE_STEPS = 60
STORE_STEP_S = 0.002


@dataclass
class Exchange:
    """One request as the server saw it."""

    messages: list[MutableMapping[str, Any]] = field(default_factory=list)
    finished_first: bool = False

    @property
    def status(self) -> int | None:
        starts = [m for m in self.messages if m["type"] == "http.response.start"]
        return int(starts[0]["status"]) if starts else None


def _scope(path: str, body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"gw"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"anthropic-version", b"2023-06-01"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("gw", 80),
        "state": {},
    }


async def exchange(
    app: GatewayApp,
    path: str,
    body: dict[str, Any],
    *,
    turns: int | None = None,
    after_s: float | None = None,
    how: str = "disconnect",
    step_s: float = 0,
) -> Exchange:
    """Send one request; `turns` loop turns (or `after_s` seconds) in, the client leaves
    (`how="disconnect"`) or the server cancels its task (`how="cancel"`)."""
    raw = orjson.dumps(body)
    gone = asyncio.Event()
    seen = Exchange()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if gone.is_set():
            return  # uvicorn drops what is sent to a client that left
        seen.messages.append(message)

    task = asyncio.ensure_future(app(_scope(path, raw), receive, send))
    if after_s is not None:
        await asyncio.wait([task], timeout=after_s)
    else:
        for _ in range(turns or 0):
            if task.done():
                break
            await asyncio.sleep(step_s)
    seen.finished_first = task.done()
    if how == "disconnect":
        gone.set()
    else:
        task.cancel()
    gone.set()
    try:
        async with asyncio.timeout(10):
            await task
    except asyncio.CancelledError:
        pass
    return seen


async def served(app: GatewayApp, path: str, body: dict[str, Any]) -> None:
    """A request that stays is answered in full: nothing earlier starved it."""
    seen = await exchange(app, path, body, turns=MAX_TURNS * 50)
    assert seen.finished_first
    assert seen.status == 200, seen.messages[:2]


@asynccontextmanager
async def running_app(engine: FakeEngine, **overrides: Any) -> AsyncIterator[GatewayApp]:
    # Two engine connections and a short pool wait: one leaked connection starves the next
    # request within a second, besides failing the idle check.
    settings = Settings(
        engines=[ENGINE],
        upstream={"max_connections": 2, "pool_timeout_s": 1.0, "refusal_wait_s": 0.3},
        **overrides,
    )
    app = create_app(settings, transport=engine.transport())
    async with app.router.lifespan_context(app):
        yield app


async def sweep(
    app: GatewayApp, engine: FakeEngine, face: str, stream: bool, how: str, *, step_s: float = 0
) -> int:
    """Cancel at every loop turn until the request finishes first; then at wall-clock points
    inside a slow first event. Returns how many cancels landed before the end.

    `step_s` > 0 (a real store under routing): each step is that long, as the request's own
    awaits are network round trips there, which loop turns alone would not move past on a
    loaded box; the sweep then ends after MAX_STORE_STEPS steps whether or not it finished."""
    path, make = FACES[face]
    state = app.state.flashbox
    landed, done_in_a_row = 0, 0
    steps = MAX_STORE_STEPS if step_s else MAX_TURNS
    for turns in range(steps):
        engine.script = Script()
        seen = await exchange(app, path, make(stream), turns=turns, how=how, step_s=step_s)
        await assert_idle(state)
        if seen.finished_first:
            done_in_a_row += 1
            if done_in_a_row == DONE_IN_A_ROW:
                break
        else:
            done_in_a_row, landed = 0, landed + 1
    else:
        if not step_s:
            raise AssertionError(f"the request never finished within {MAX_TURNS} loop turns")
    for after_s in TIMED_POINTS:
        engine.script = Script(first_event_delay_s=0.3)
        seen = await exchange(app, path, make(stream), after_s=after_s, how=how)
        await assert_idle(state)
    engine.script = Script()
    await served(app, path, make(stream))
    await assert_idle(state)
    return landed


@pytest.mark.parametrize("how", ["disconnect", "cancel"])
@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
@pytest.mark.parametrize("face", sorted(FACES))
async def test_cancelled_at_every_await_nothing_is_held(face: str, stream: bool, how: str) -> None:
    engine = FakeEngine()
    async with running_app(engine) as app:
        landed = await sweep(app, engine, face, stream, how)
    # The sweep really cut requests at many points on their way (not only before the first).
    assert landed >= 10
    if how == "disconnect":
        sent = {generate["rid"] for generate in engine.generates}
        # A client that left after /generate went out cost the engine an abort.
        assert set(engine.aborts) <= sent
        assert engine.aborts


@pytest.mark.parametrize("stream", [False, True], ids=["one-shot", "streamed"])
@pytest.mark.parametrize("face", sorted(FACES))
async def test_in_a_fleet_cancelled_at_every_await_nothing_is_held(
    face: str, stream: bool, redis_url: str
) -> None:
    """The same, with routing's claims and the fair shares going through the store."""
    engine = FakeEngine()
    async with running_app(engine, state_url=redis_url, state={"timeout_s": 1.0}) as app:
        await sweep(app, engine, face, stream, "disconnect", step_s=STORE_STEP_S)


@pytest.fixture(scope="module")
def redis_url() -> Any:
    if redis_server_binary() is None:
        pytest.skip("no valkey-server or redis-server on PATH (make debs installs redis-server)")
    proc = start_redis()
    try:
        yield proc.url
    finally:
        proc.stop()


async def test_the_sweeps_client_sees_a_whole_answer_when_it_stays() -> None:
    """The driver itself: a request left alone gets its face's complete answer."""
    engine = FakeEngine()
    async with running_app(engine) as app:
        path, make = FACES["chat"]
        seen = await exchange(app, path, make(False), turns=MAX_TURNS * 50)
        body = b"".join(m.get("body", b"") for m in seen.messages)
        answer = orjson.loads(body)
        assert answer["choices"][0]["message"]["content"] == "Hello world"
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as client:
            metrics = (await client.get("/metrics")).text
        assert 'flashbox_upstream_connections_in_use{pool="generation"} 0.0' in metrics
