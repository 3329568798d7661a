"""Admission control and graceful shutdown for chat requests, as one pure-ASGI middleware.

At most `admission.max_in_flight` chat requests run at once; up to `admission.max_queue` more
wait in FIFO order for at most `admission.queue_timeout_s`. Beyond the queue a request is refused
at once with 429, and one that waited too long with 503, both with Retry-After. The slot is held
until the response's last byte is sent, so a long stream counts for its whole life. The wait is
part of the `queue` stage of flashbox_ttft_stage_seconds: that stage is measured from arrival,
which RequestContextMiddleware (outside this one) stamps.

On SIGTERM (`begin_drain`), queued and new requests get 503; in-flight ones get
`shutdown.grace_s` to finish; what is still running then is aborted on its engine replica
(POST /abort_request), so its stream ends with an error event instead of being cut.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import AuthenticationError, GatewayError, NoReplicaError, RateLimitError
from gateway.faces.headers import read_headers
from gateway.settings import AdmissionSettings, ShutdownSettings
from gateway.state import AppState

log = logging.getLogger("gateway.admission")


@dataclass(eq=False)
class Ticket:
    """One request holding a slot: what an abort at shutdown needs to find it on the engine."""

    scope_state: dict[str, Any]
    app_state: AppState


@dataclass
class AdmissionController:
    settings: AdmissionSettings
    shutdown: ShutdownSettings
    running: set[Ticket] = field(default_factory=set)
    _waiters: deque[tuple[asyncio.Future[None], Ticket]] = field(default_factory=deque)
    draining: bool = False
    _drain_task: asyncio.Task[None] | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def _retry_headers(self) -> dict[str, str]:
        return {"retry-after": str(self.settings.retry_after_s)}

    def _shutting_down(self) -> NoReplicaError:
        return NoReplicaError(
            "The gateway is shutting down; retry on another instance.",
            code="shutting_down",
            headers=self._retry_headers(),
        )

    async def acquire(self, entry: Ticket) -> None:
        """Take a slot, waiting in the queue if need be; raises the refusal to send."""
        if self.draining:
            raise self._shutting_down()
        if len(self.running) < self.settings.max_in_flight and not self._waiters:
            self._take(entry)
            return
        if len(self._waiters) >= self.settings.max_queue:
            raise RateLimitError(
                f"The gateway is serving {self.settings.max_in_flight} requests and "
                f"{self.settings.max_queue} more are waiting; retry after the Retry-After delay.",
                code="queue_full",
                headers=self._retry_headers(),
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        item = (waiter, entry)
        self._waiters.append(item)
        queued = entry.app_state.metrics.admission_queued
        queued.inc()
        try:
            async with asyncio.timeout(self.settings.queue_timeout_s):
                await waiter
        except TimeoutError:
            self._give_up(item)
            raise NoReplicaError(
                f"The request waited {self.settings.queue_timeout_s:g}s for a free slot; "
                "retry after the Retry-After delay.",
                code="queue_timeout",
                headers=self._retry_headers(),
            ) from None
        except GatewayError:
            raise  # drained: it never held a slot
        except BaseException:
            self._give_up(item)
            raise
        finally:
            queued.dec()

    def _give_up(self, item: tuple[asyncio.Future[None], Ticket]) -> None:
        if item in self._waiters:
            self._waiters.remove(item)
        elif item[1] in self.running:
            # It was handed a slot at the moment it gave up: pass the slot on.
            self.release(item[1])

    def _take(self, entry: Ticket) -> None:
        self.running.add(entry)
        self.idle.clear()

    def release(self, entry: Ticket) -> None:
        self.running.discard(entry)
        # The slot goes to the oldest waiter, taken on its behalf so no newcomer can jump in.
        while self._waiters and len(self.running) < self.settings.max_in_flight:
            waiter, waiting = self._waiters.popleft()
            if not waiter.done():
                self._take(waiting)
                waiter.set_result(None)
        if not self.running:
            self.idle.set()

    # -- shutdown -------------------------------------------------------------------------

    def begin_drain(self) -> None:
        """SIGTERM: refuse what waits, let what runs finish within the grace period."""
        if self.draining:
            return
        self.draining = True
        while self._waiters:
            waiter, _ = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(self._shutting_down())
        log.info(
            "draining: %d requests in flight, %.0fs grace", len(self.running), self.shutdown.grace_s
        )
        self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        if not self.running:
            return
        try:
            async with asyncio.timeout(self.shutdown.grace_s):
                await self.idle.wait()
            return
        except TimeoutError:
            pass
        aborts = [self._abort(entry) for entry in list(self.running)]
        log.warning("grace period over: aborting %d requests on the engine", len(aborts))
        await asyncio.gather(*aborts)

    @staticmethod
    async def _abort(entry: Ticket) -> None:
        name = entry.scope_state.get("replica")
        rid = entry.scope_state.get("rid")
        state = entry.app_state
        replica = next((r for r in state.picker.replicas if r.name == name), None)
        if replica is None or not isinstance(rid, str):
            return  # not sent to an engine yet: it ends on its own
        state.metrics.upstream_aborts.labels(phase="shutdown").inc()
        await state.engine.abort(replica, rid)


class ErrorRenderer(Protocol):
    """A face's error response: its own JSON shape (OpenAI's, Anthropic's)."""

    def __call__(self, error: GatewayError, request_id: str) -> Response: ...


class AdmissionMiddleware:
    """Applies an AdmissionController to the generation requests `app` serves (gateway.app.
    GatewayApp puts one around each face's serve function, and routes only those there)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        controller: AdmissionController,
        api: str,
        render_error: ErrorRenderer,
    ) -> None:
        self.app = app
        self.controller = controller
        self.api = api
        self.render_error = render_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state: AppState = scope["app"].state.flashbox
        if not _authorized(state, scope):
            # The route answers 401; an unauthenticated client must not take or wait for a slot.
            await self.app(scope, receive, send)
            return
        scope_state = scope.setdefault("state", {})
        entry = Ticket(scope_state, state)
        try:
            await self.controller.acquire(entry)
        except GatewayError as exc:
            reason = exc.code or "refused"
            state.metrics.admission_rejected.labels(reason=reason).inc()
            state.refused("unknown", exc, self.api)
            response = self.render_error(exc, str(scope_state.get("request_id", "")))
            await response(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.controller.release(entry)


_CREDENTIALS = (b"authorization", b"x-api-key")


def _authorized(state: AppState, scope: Scope) -> bool:
    if not state.auth.enabled:
        return True
    found = read_headers(scope["headers"], _CREDENTIALS)
    try:
        state.auth.check(found.get(b"authorization"), found.get(b"x-api-key"))
    except AuthenticationError:
        return False
    return True
