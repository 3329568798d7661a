"""Noticing a client that left, in every phase, and the SSE response that streams a relay.

After the request body is read, the only message ASGI's `receive` can still deliver is
`http.disconnect`. `DisconnectWatcher` waits for it in a task of its own; work that must stop
when the client leaves runs through `watcher.run(...)`, and `SSEResponse` streams while watching.
Nothing else may call `receive` once the watcher runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.errors import ClientDisconnected
from gateway.stream import sse
from gateway.stream.sse import SendBytes

T = TypeVar("T")


class DisconnectWatcher:
    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.gone = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # The task inside `run` right now, and whether we cancelled it because the client left.
        self._runner: asyncio.Task[Any] | None = None
        self._interrupted = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.gone.set()
                runner = self._runner
                if runner is not None and not self._interrupted:
                    self._interrupted = True
                    runner.cancel()
                return

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Await `work`, or cancel it and raise ClientDisconnected if the client leaves first.

        `work` runs in the caller's task, which the watcher cancels when the client leaves:
        no task and no asyncio.wait per phase, which the first token would wait behind.
        """
        if self.gone.is_set():
            work.close()
            raise ClientDisconnected
        runner = asyncio.current_task()
        assert runner is not None
        self._runner, self._interrupted = runner, False
        try:
            result = await work
        except asyncio.CancelledError:
            # Ours only if nobody else cancelled the task too (server shutdown): then it goes on.
            if self._interrupted and runner.uncancel() == 0:
                raise ClientDisconnected from None
            raise
        finally:
            self._runner = None
        if self._interrupted:
            # `work` swallowed the cancel; the client is gone all the same.
            runner.uncancel()
            raise ClientDisconnected
        return result


class SSEResponse(Response):
    """Streams `body(send_bytes)` as text/event-stream; calls `on_gone` if the client leaves,
    and `on_close` last, however the response ends (what the request holds is given back there).

    What `body` sends goes out at once: no buffering here, so a pure-ASGI middleware around it
    sees every body message. `send_bytes(data, last=True)` ends the response in the same
    message (one write); otherwise an empty closing message follows `body`.
    """

    def __init__(
        self,
        body: Callable[[SendBytes], Coroutine[Any, Any, None]],
        watcher: DisconnectWatcher,
        on_gone: Callable[[], Awaitable[None]],
        on_close: Callable[[], Awaitable[None]],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status_code = 200
        self.background = None
        self._body_fn = body
        self._watcher = watcher
        self._on_gone = on_gone
        self._on_close = on_close
        # No body attribute: Starlette would add "content-length: 0" to a stream.
        self.init_headers({**sse.HEADERS, **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})

            ended = False

            async def send_bytes(data: bytes, *, last: bool = False) -> None:
                nonlocal ended
                if last:
                    # A server answers `receive` with http.disconnect once the response is
                    # complete (uvicorn does): from here on that is not a client leaving, and
                    # must not cancel the bookkeeping that follows into an abort.
                    ended = True
                    self._watcher.stop()
                await send({"type": "http.response.body", "body": data, "more_body": not last})

            try:
                await self._watcher.run(self._body_fn(send_bytes))
            except ClientDisconnected:
                await self._on_gone()
                return
            if not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self._watcher.stop()
            await self._on_close()
