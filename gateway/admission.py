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

Per-key rate limits (gateway.ratelimit) are checked first, where the key is known and before
a slot is taken: a request over its key's limit is refused with 429, Retry-After and the
face's rate-limit headers, and never waits in the queue. Once its response is sent, its prompt
+ completion tokens (the request record the core's Run leaves in the scope state) are charged
to its key.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import AuthenticationError, GatewayError, NoReplicaError, RateLimitError
from gateway.faces.headers import read_headers
from gateway.observability.timeline import RequestRecord
from gateway.ratelimit import Decision, openai_limit_headers
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
        # And what waits for a running slot on an engine (gateway.fairness): it holds no
        # engine work yet, so it goes now, not at the end of the grace period. (Whatever
        # waits there also holds a slot here; every ticket carries the app's one state.)
        if self.running:
            next(iter(self.running)).app_state.slots.refuse_waiting(self._shutting_down)
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


class LimitHeaders(Protocol):
    """A face's rate-limit headers for a request's decision (OpenAI's x-ratelimit-*, ...)."""

    def __call__(self, decision: Decision) -> list[tuple[bytes, bytes]]: ...


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
        limit_headers: LimitHeaders = openai_limit_headers,
    ) -> None:
        self.app = app
        self.controller = controller
        self.api = api
        self.render_error = render_error
        self.limit_headers = limit_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state: AppState = scope["app"].state.flashbox
        limiter = state.limiter
        if not state.auth.enabled and not limiter.enabled:
            credentials: dict[bytes, str] = {}
        else:
            credentials = read_headers(scope["headers"], _CREDENTIALS)
        if not _authorized(state, credentials):
            # The route answers 401; an unauthenticated client must not take or wait for a slot.
            await self.app(scope, receive, send)
            return
        scope_state = scope.setdefault("state", {})
        key = limiter.identify(
            scope,
            state.auth.enabled,
            credentials.get(b"authorization"),
            credentials.get(b"x-api-key"),
        )
        # Whom the request's share of the engine counts against (gateway.fairness).
        scope_state["flow"] = key or "unknown"
        decision = None
        if limiter.enabled:
            decision = None if key is None else await limiter.check(key)
            if decision is not None:
                headers = self.limit_headers(decision)
                if not decision.allowed:
                    error = decision.error()
                    error.headers = {
                        "retry-after": str(decision.retry_after),
                        **{name.decode(): value.decode() for name, value in headers},
                    }
                    await self._refuse(state, error, "rate_limited", scope, receive, send)
                    return
                send = _with_headers(send, headers)
        entry = Ticket(scope_state, state)
        try:
            await self.controller.acquire(entry)
        except GatewayError as exc:
            await self._refuse(state, exc, exc.code or "refused", scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.controller.release(entry)
        if decision is not None:
            record = scope_state.get("record")
            if isinstance(record, RequestRecord):
                await limiter.charge(decision.key, record.prompt_tokens + record.completion_tokens)

    async def _refuse(
        self,
        state: AppState,
        error: GatewayError,
        reason: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        state.metrics.admission_rejected.labels(reason=reason).inc()
        state.refused("unknown", error, self.api)
        response = self.render_error(error, str(scope["state"].get("request_id", "")))
        await response(scope, receive, send)


def _with_headers(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    """`send`, adding `headers` to the response's start (a pass-through call per body message,
    only for requests that have a rate limit)."""

    async def send_with_limits(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *headers]}
        await send(message)

    return send_with_limits


_CREDENTIALS = (b"authorization", b"x-api-key")


def _authorized(state: AppState, credentials: dict[bytes, str]) -> bool:
    if not state.auth.enabled:
        return True
    try:
        state.auth.check(credentials.get(b"authorization"), credentials.get(b"x-api-key"))
    except AuthenticationError:
        return False
    return True
