"""Auth, rate limits, admission control and graceful shutdown for the faces' endpoints, as one
pure-ASGI middleware (gateway.app.GatewayApp and gateway.faces.registry put it around each).

In order, before anything else is spent on a request: the one auth decision (gateway.auth:
a refused key gets its 401 here, before it can touch a rate limit or a slot), the key's rate
limit, then a slot in the endpoint's pool.

Two pools. Generation (chat, Messages, Responses): at most `admission.max_in_flight` run at
once; up to `admission.max_queue` more wait in FIFO order for at most
`admission.queue_timeout_s`. Counting (count_tokens, input_tokens) has its own pool, bounded
by `admission.count_*` the same way, so a flood of counts cannot take generation's slots and
a full generation pool cannot hold a count up. Beyond a queue a request is refused at once
with 429, and one that waited too long with 503, both with Retry-After. The slot is held until
the response's last byte is sent, so a long stream counts for its whole life. The wait is part
of the `queue` stage of flashbox_ttft_stage_seconds: that stage is measured from arrival,
which RequestContextMiddleware (outside this one) stamps.

On SIGTERM (`begin_drain`), queued and new requests get 503; in-flight ones get
`shutdown.grace_s` to finish; what is still running then is aborted on its engine replica
(POST /abort_request), so its stream ends with an error event instead of being cut.

Per-key rate limits (gateway.ratelimit): a request over its key's limit is refused with 429,
Retry-After and the face's rate-limit headers, and never waits in a queue. Every request,
counting ones included, is one request against the key's requests per minute. Once a
generation response is sent, its prompt + completion tokens (the request record the core's Run
leaves in the scope state) are charged to its key; a count is charged no tokens (it generates
none, and Claude Code counts what it then sends: the tokens are charged once, when sent).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.auth import authenticate
from gateway.errors import AuthenticationError, GatewayError, NoReplicaError, RateLimitError
from gateway.faces.errors import ErrorRenderer
from gateway.observability.refusals import log_refusal
from gateway.observability.timeline import RequestRecord
from gateway.observability.tracing import RequestTrace
from gateway.ratelimit import Decision, openai_limit_headers
from gateway.settings import AdmissionSettings, ShutdownSettings
from gateway.state import AppState

log = logging.getLogger("gateway.admission")


@dataclass(eq=False)
class Ticket:
    """One request holding a slot: what an abort at shutdown needs to find it on the engine."""

    scope_state: dict[str, Any]
    app_state: AppState


@dataclass(frozen=True, slots=True)
class PoolBounds:
    what: str  # the requests it holds, in the refusals' words
    max_in_flight: int
    max_queue: int
    queue_timeout_s: float


@dataclass
class AdmissionController:
    """The generation pool; its `counting` pool is another controller of the same kind."""

    settings: AdmissionSettings
    shutdown: ShutdownSettings
    # True for the counting endpoints' pool (made by the generation pool, never by hand).
    for_counting: bool = False
    running: set[Ticket] = field(default_factory=set)
    _waiters: deque[tuple[asyncio.Future[None], Ticket]] = field(default_factory=deque)
    draining: bool = False
    _drain_task: asyncio.Task[None] | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    bounds: PoolBounds = field(init=False)
    counting: AdmissionController | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.idle.set()
        s = self.settings
        if self.for_counting:
            self.bounds = PoolBounds(
                "token-counting requests",
                s.count_max_in_flight,
                s.count_max_queue,
                s.count_queue_timeout_s,
            )
        else:
            self.bounds = PoolBounds("requests", s.max_in_flight, s.max_queue, s.queue_timeout_s)
            self.counting = AdmissionController(s, self.shutdown, for_counting=True)

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
        bounds = self.bounds
        if self.draining:
            raise self._shutting_down()
        if len(self.running) < bounds.max_in_flight and not self._waiters:
            self._take(entry)
            return
        if len(self._waiters) >= bounds.max_queue:
            raise RateLimitError(
                f"The gateway is serving {bounds.max_in_flight} {bounds.what} and "
                f"{bounds.max_queue} more are waiting; retry after the Retry-After delay.",
                code="queue_full",
                headers=self._retry_headers(),
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        item = (waiter, entry)
        self._waiters.append(item)
        # The gauge is generation's queue, as it always was; a count's wait is its own.
        queued = None if self.for_counting else entry.app_state.metrics.admission_queued
        if queued is not None:
            queued.inc()
        try:
            async with asyncio.timeout(bounds.queue_timeout_s):
                await waiter
        except TimeoutError:
            self._give_up(item)
            raise NoReplicaError(
                f"The request waited {bounds.queue_timeout_s:g}s for a free slot; "
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
            if queued is not None:
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
        while self._waiters and len(self.running) < self.bounds.max_in_flight:
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
        if self.counting is not None:
            self.counting.begin_drain()
        while self._waiters:
            waiter, _ = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(self._shutting_down())
        # And what waits for a running slot on an engine (gateway.fairness): it holds no
        # engine work yet, so it goes now, not at the end of the grace period. (Whatever
        # waits there also holds a slot here; every ticket carries the app's one state.)
        if self.running and not self.for_counting:
            next(iter(self.running)).app_state.slots.refuse_waiting(self._shutting_down)
        log.info(
            "draining %s: %d in flight, %.0fs grace",
            self.bounds.what,
            len(self.running),
            self.shutdown.grace_s,
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


class LimitHeaders(Protocol):
    """A face's rate-limit headers for a request's decision (OpenAI's x-ratelimit-*, ...)."""

    def __call__(self, decision: Decision) -> list[tuple[bytes, bytes]]: ...


class AdmissionMiddleware:
    """Auth, the key's rate limit and a slot for the face endpoint `app` serves.

    `controller`: the generation pool (gateway.app.GatewayApp passes the app's); None: the
    app's, found per request (gateway.faces.registry builds the counting endpoints' gate before
    any app exists). `counting`: take the slot from that controller's counting pool.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        controller: AdmissionController | None,
        api: str,
        render_error: ErrorRenderer,
        limit_headers: LimitHeaders = openai_limit_headers,
        counting: bool = False,
    ) -> None:
        self.app = app
        self.controller = controller
        self.api = api
        self.render_error = render_error
        self.limit_headers = limit_headers
        self.counting = counting

    def _pool(self, scope: Scope) -> AdmissionController:
        controller = self.controller
        if controller is None:
            controller = scope["app"].state.admission
            assert isinstance(controller, AdmissionController)
        if self.counting:
            assert controller.counting is not None
            return controller.counting
        return controller

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state: AppState = scope["app"].state.flashbox
        scope_state = scope.setdefault("state", {})
        # Set by gateway.middleware only when tracing is on.
        trace: RequestTrace | None = scope_state.get("trace")
        began = time.perf_counter() if trace is not None else 0.0
        try:
            caller = authenticate(scope, state.auth)
        except AuthenticationError as exc:
            # Before anything is charged or taken: a wrong key costs its owner nothing.
            if trace is not None:
                _traced(trace, began, "unauthenticated", None)
            state.refused("unknown", exc, self.api)
            await self._answer(exc, scope, receive, send)
            return
        limiter = state.limiter
        key = caller.key_id if state.auth.enabled else limiter.identify(scope, False, None, None)
        # Whom the request's share of the engine counts against (gateway.fairness).
        scope_state["flow"] = key or "unknown"
        # Only a configured key's id names the caller in a span (never an address, never a key).
        key_id = caller.key_id if state.auth.enabled else None
        decision = None
        if limiter.enabled:
            checked = time.perf_counter() if trace is not None else 0.0
            decision = None if key is None else await limiter.check(key)
            if trace is not None:
                allowed = decision is None or decision.allowed
                trace.child(
                    "rate_limit",
                    trace.ns(checked),
                    trace.ns(time.perf_counter()),
                    {"flashbox.rate_limit.allowed": allowed},
                    error=None if allowed else "rate_limited",
                )
            if decision is not None:
                headers = self.limit_headers(decision)
                if not decision.allowed:
                    if trace is not None:
                        _traced(trace, began, "rate_limited", key_id)
                    error = decision.error()
                    error.headers = {
                        "retry-after": str(decision.retry_after),
                        **{name.decode(): value.decode() for name, value in headers},
                    }
                    await self._refuse(state, error, "rate_limited", scope, receive, send)
                    return
                send = _with_headers(send, headers)
        pool = self._pool(scope)
        entry = Ticket(scope_state, state)
        try:
            await pool.acquire(entry)
        except GatewayError as exc:
            reason = exc.code or "refused"
            if trace is not None:
                _traced(trace, began, reason, key_id)
            await self._refuse(
                state, exc, f"count_{reason}" if self.counting else reason, scope, receive, send
            )
            return
        if trace is not None:
            _traced(trace, began, "admitted", key_id)
        try:
            await self.app(scope, receive, send)
        finally:
            pool.release(entry)
        if decision is not None and not self.counting:
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
        await self._answer(error, scope, receive, send)

    async def _answer(
        self, error: GatewayError, scope: Scope, receive: Receive, send: Send
    ) -> None:
        # Every refusal of admission's own passes here (the auth one does not pass _refuse).
        log_refusal(scope, error)
        response = self.render_error(error, str(scope["state"].get("request_id", "")))
        await response(scope, receive, send)


def _traced(trace: RequestTrace, began: float, outcome: str, key_id: str | None) -> None:
    """The admission span: auth, the key's rate limit and the wait for a slot."""
    attributes = {"flashbox.admission.outcome": outcome}
    if key_id is not None:
        attributes["flashbox.key_id"] = key_id
        trace.set({"flashbox.key_id": key_id})
    error = None if outcome == "admitted" else outcome
    ended = trace.ns(time.perf_counter())
    trace.child("admission", trace.ns(began), ended, attributes, error=error)


def _with_headers(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    """`send`, adding `headers` to the response's start (a pass-through call per body message,
    only for requests that have a rate limit)."""

    async def send_with_limits(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *headers]}
        await send(message)

    return send_with_limits
