"""An ASGI response that runs its body while watching for the client to go away.

Starlette's StreamingResponse only notices a disconnect when a write fails, which never happens
while a request is queued or stalled; the engine must abort then too, as SGLang does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from starlette.types import Receive, Scope, Send

Body = Callable[[Send], Coroutine[Any, Any, None]]


class InjectedDisconnectError(Exception):
    """Raised on purpose (fault injection): uvicorn then closes the connection abruptly."""


class _QuietInjectedDisconnect(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, InjectedDisconnectError):
                return False
            exc = exc.__cause__ or exc.__context__
        return True


def silence_injected_disconnects() -> None:
    """Keep uvicorn from logging a traceback for every injected connection drop."""
    logging.getLogger("uvicorn.error").addFilter(_QuietInjectedDisconnect())


class WatchedResponse:
    def __init__(self, body: Body, on_disconnect: Callable[[], None]) -> None:
        self._body = body
        self._on_disconnect = on_disconnect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = asyncio.create_task(self._body(send))
        watcher = asyncio.create_task(self._watch(receive))
        try:
            done, _ = await asyncio.wait({body, watcher}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            body.cancel()
            watcher.cancel()
            self._on_disconnect()
            raise
        if body in done:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            body.result()
            return
        body.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await body
        self._on_disconnect()

    @staticmethod
    async def _watch(receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
