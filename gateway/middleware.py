"""Request context: request id, replica header, header bounds, a last-resort OpenAI 500.

Pure ASGI (no BaseHTTPMiddleware): it only edits the response-start message, so a streamed
body passes through untouched, event by event.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Protocol

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.observability.tracing import TRACE_ID_HEADER, RequestTrace, Tracing

log = logging.getLogger("gateway.middleware")

_SAFE_ID = re.compile(rb"[A-Za-z0-9._:\-]+")
_INTERNAL_ERROR = (
    500,
    "internal_error",
    "The gateway failed unexpectedly; the error is logged with this request id.",
)
HEADERS_TOO_LARGE = (
    431,
    "headers_too_large",
    "The request headers are too many or too large; send fewer or shorter headers "
    "(security.max_headers, security.max_header_bytes).",
)


class ErrorBody(Protocol):
    """The JSON body of an error this middleware answers itself, in the shape of the face that
    serves `path` (OpenAI's by default)."""

    def __call__(
        self, path: str, status: int, code: str, message: str, request_id: str
    ) -> bytes: ...


def openai_error_body(path: str, status: int, code: str, message: str, request_id: str) -> bytes:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


class RequestContextMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_request_id_chars: int,
        max_header_bytes: int,
        max_headers: int,
        error_body: ErrorBody = openai_error_body,
        tracing: Tracing | None = None,
    ) -> None:
        self.app = app
        self.error_body = error_body
        # None unless tracing is on (gateway.observability.tracing): then the faces' requests
        # get a server span, and their answers the trace id header.
        self.tracing = tracing
        self.max_id = max_request_id_chars
        self.max_header_bytes = max_header_bytes
        self.max_headers = max_headers

    def _headers_too_large(self, scope: Scope) -> bool:
        # The exact bound on a header block that ended, before any route or admission work;
        # one that does not end is cut while it arrives (gateway/connection.py).
        headers = scope["headers"]
        if len(headers) > self.max_headers:
            return True
        return sum(len(k) + len(v) for k, v in headers) > self.max_header_bytes

    def _client_request_id(self, scope: Scope) -> str | None:
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                # Honoured only when it is safe to echo in a header and to write in a log.
                if len(value) <= self.max_id and _SAFE_ID.fullmatch(value):
                    return bytes(value).decode()
                break
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrival = time.perf_counter()
        # The engine's rid is always ours, 32 hex digits, never the client's id: SGLang's
        # abort_request stops every request whose rid *starts with* the one given, so a rid a
        # client could choose ("a") would let its disconnect abort other clients' generations.
        # Ids of one fixed width are never each other's prefix. The client's x-request-id is
        # echoed, logged and forwarded to the engine as a header; without one, the rid is it.
        rid = uuid.uuid4().hex
        request_id = self._client_request_id(scope) or rid
        state = scope.setdefault("state", {})
        state.update(request_id=request_id, rid=rid, arrival=arrival, replica="none")
        started = False
        if self._headers_too_large(scope):
            status, code, text = HEADERS_TOO_LARGE
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"x-request-id", request_id.encode()),
                    ],
                }
            )
            body = self.error_body(scope["path"], status, code, text, request_id)
            await send({"type": "http.response.body", "body": body})
            return

        trace: RequestTrace | None = None
        tracing = self.tracing
        if tracing is not None and scope["path"] in tracing.traced_paths:
            trace = state["trace"] = tracing.start(scope, arrival, request_id)

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", request_id.encode()))
                headers.append((b"x-flashbox-replica", str(state["replica"]).encode()))
                if trace is not None:
                    trace.status_code = message["status"]
                    if trace.recording:
                        headers.append((TRACE_ID_HEADER, trace.trace_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        if trace is None:
            await self._serve(scope, receive, send_with_headers, request_id, lambda: started)
            return
        # The server span is current while the request runs: its log lines carry the trace id
        # (gateway.observability.logging), and it ends here on every path.
        token = trace.attach()
        failure: BaseException | None = None
        try:
            await self._serve(scope, receive, send_with_headers, request_id, lambda: started)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            trace.end(trace.status_code, failure)
            trace.detach(token)
            failure = None  # no frame -> exception -> traceback cycle left to the collector

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        send_with_headers: Send,
        request_id: str,
        started: Callable[[], bool],
    ) -> None:
        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            log.exception("unhandled error in request %s", request_id)
            if started():
                raise
            status, code, text = _INTERNAL_ERROR
            await send_with_headers(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            body = self.error_body(scope["path"], status, code, text, request_id)
            await send_with_headers({"type": "http.response.body", "body": body})
