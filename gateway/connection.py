"""Connection-level bounds, enforced while the bytes arrive (uvicorn's httptools protocol).

The ASGI app only sees a request once its header block is parsed, and uvicorn with httptools
bounds neither that block nor how long it or the body may take: a header block that never
ends is held in full (4 x 100 MB of header lines cost the gateway 400 MB), a byte every few
seconds holds a connection forever, and `limit_concurrency` refuses requests, not
connections. `BoundedHttpToolsProtocol` adds, per connection:

- header bytes: a request whose header block is still unfinished past
  `security.max_header_bytes` is answered 431 and closed (the middleware still applies the
  exact bound, on names and values, to blocks that do end);
- a header deadline: the block must be complete within `security.header_timeout_s` of the
  connection opening or of the request's first byte (408, or a bare close when not one byte
  of a request came);
- a body rate: a body gets `security.body_timeout_s` plus one second per
  `security.body_min_bytes_per_s` bytes it sent; slower, it is cut with 408;
- a connection cap: past `security.max_connections` open connections a new one is answered
  503 and closed at once.

Idle keep-alive connections are uvicorn's (`timeout_keep_alive`). Errors are in the face's
shape of the request's path (OpenAI's when the path is not known yet).

Written against uvicorn 0.54 / httptools 0.9 (pinned in pyproject): it relies on the base
class calling on_message_begin / on_headers_complete / on_body / on_message_complete from
`parser.feed_data` inside `data_received`, and on its `cycle`, `flow`, `url` and `connections`
attributes. Per read it only counts header bytes until the block ends; a body arms one timer.
"""

from __future__ import annotations

import asyncio
import http
import logging
import time
import uuid
from dataclasses import dataclass, field

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from gateway.middleware import HEADERS_TOO_LARGE, ErrorBody, openai_error_body

log = logging.getLogger("gateway.connection")

# After an error answer the connection reads (and drops) what the client still sends for this
# long before closing: closing with unread bytes makes the kernel reset the connection, and
# the reset can destroy the answer before the client reads it.
_LINGER_S = 1.0
# At most one warning per this many seconds that the connection cap turned clients away.
_CAP_WARNING_EVERY_S = 60.0

_HEADER_TIMEOUT = (
    "request_timeout",
    "The request headers did not arrive within security.header_timeout_s; send the whole "
    "header block at once.",
)
_BODY_TIMEOUT = (
    "request_timeout",
    "The request body arrived too slowly (security.body_timeout_s, "
    "security.body_min_bytes_per_s); send the body at once.",
)
_TOO_MANY_CONNECTIONS = (
    "too_many_connections",
    "The gateway has too many open connections (security.max_connections); retry shortly, "
    "or reuse a keep-alive connection.",
)


@dataclass(slots=True)
class ConnectionBounds:
    """The bounds from SecuritySettings, shared by every connection of one server."""

    max_header_bytes: int
    header_timeout_s: float
    body_timeout_s: float
    body_min_bytes_per_s: float
    max_connections: int
    error_body: ErrorBody = openai_error_body
    # Monotonic time of the last warning that the cap refused a connection.
    last_cap_warning: float = field(default=-_CAP_WARNING_EVERY_S)


def protocol_class(bounds: ConnectionBounds) -> type[BoundedHttpToolsProtocol]:
    """uvicorn's `http=` class for these bounds (uvicorn builds one protocol per connection
    with fixed arguments, so the bounds ride on a subclass)."""
    bound: type[BoundedHttpToolsProtocol] = type(
        "BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"bounds": bounds}
    )
    return bound


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    bounds: ConnectionBounds

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, object],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # True from the end of one request (or the connection's start) until the next
        # request's header block is complete.
        self._reading_headers = True
        # Bytes of the current header block so far (chunks that hold a block's start or end
        # are not counted, so the count runs at most one read short).
        self._header_bytes = 0
        self._headers_completed = 0
        self._request_begun = False
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_started = 0.0
        self._body_bytes = 0
        # Set once an error was answered: what still arrives is dropped unread.
        self._refused = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        over_cap = len(self.connections) >= self.bounds.max_connections
        super().connection_made(transport)
        if over_cap:
            # Not counted: a refused connection must not keep others out while it closes.
            self.connections.discard(self)
            self._warn_cap()
            self._refuse(503, *_TOO_MANY_CONNECTIONS, linger=False)
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        reading_headers = self._reading_headers
        if reading_headers and self._header_timer is None:
            # The first byte of a keep-alive connection's next request: until now the idle
            # keep-alive timeout applied, from now the header deadline.
            self._arm_header_timer()
        completed = self._headers_completed
        super().data_received(data)
        if self._reading_headers:
            if reading_headers and completed == self._headers_completed:
                self._header_bytes += len(data)
                if self._header_bytes > self.bounds.max_header_bytes:
                    self._refuse(431, *HEADERS_TOO_LARGE[1:])
        elif self._body_timer is None and not self.transport.is_closing():
            self._body_timer = self.loop.call_later(self.bounds.body_timeout_s, self._body_deadline)

    # httptools parser callbacks

    def on_message_begin(self) -> None:
        self._request_begun = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._reading_headers = False
        self._headers_completed += 1
        self._header_bytes = 0
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self._body_started = self.loop.time()
        self._body_bytes = 0
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading_headers = True
        self._request_begun = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    # deadlines

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(
            self.bounds.header_timeout_s, self._header_deadline
        )

    def _header_deadline(self) -> None:
        self._header_timer = None
        if self._refused or self.transport.is_closing() or not self._reading_headers:
            return
        if self.flow.read_paused or self._responding():
            # Not the client's delay: the gateway stopped reading (a pipelined request waits
            # for the one before it), or it is still answering the previous request.
            self._arm_header_timer()
            return
        if not self._request_begun:
            # Not one byte of a request: nothing to answer, just a connection to let go.
            self.transport.close()
            return
        self._refuse(408, *_HEADER_TIMEOUT)

    def _body_deadline(self) -> None:
        self._body_timer = None
        if self._refused or self.transport.is_closing() or self._reading_headers:
            return
        now = self.loop.time()
        if self.flow.read_paused or self.cycle.waiting_for_100_continue:
            # The app is not reading the body (uvicorn stops reading at 64 KiB buffered, and
            # sends `100 Continue` on the app's first read): the client waits on us, so its
            # allowance starts again.
            self._body_started, self._body_bytes = now, 0
        deadline = (
            self._body_started
            + self.bounds.body_timeout_s
            + self._body_bytes / self.bounds.body_min_bytes_per_s
        )
        if now < deadline:
            self._body_timer = self.loop.call_later(deadline - now, self._body_deadline)
            return
        self._refuse(408, *_BODY_TIMEOUT)

    def _cancel_timers(self) -> None:
        for timer in (self._header_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._body_timer = None

    # refusing

    def _responding(self) -> bool:
        cycle = self.cycle
        return cycle is not None and cycle.response_started and not cycle.response_complete

    def _refuse(self, status: int, code: str, message: str, *, linger: bool = True) -> None:
        """Answer `status` (unless a response is already on the wire) and close."""
        self._refused = True
        self._cancel_timers()
        if self.transport.is_closing():
            return
        cycle = self.cycle
        # An answer is owed unless this request's response already began, or the previous
        # request's response is still being sent (the 408 would land inside it).
        can_answer = (
            cycle is None
            or not cycle.response_started
            or (self._reading_headers and cycle.response_complete)
        )
        if cycle is not None and not cycle.response_complete:
            # The app's task for this request may still run: its sends go nowhere, and its
            # next receive says the client is gone.
            cycle.disconnected = True
            cycle.message_event.set()
        if can_answer:
            self.transport.write(self._error_response(status, code, message))
        linger = linger and can_answer
        log.debug("refused %s with %d: %s", self.client, status, code)
        if linger:
            self.flow.resume_reading()
            self.loop.call_later(_LINGER_S, self.transport.close)
        else:
            self.transport.close()

    def _error_response(self, status: int, code: str, message: str) -> bytes:
        request_id = uuid.uuid4().hex
        path = self.url.split(b"?", 1)[0].decode("latin-1") if self._request_begun else "/"
        body = self.bounds.error_body(path, status, code, message, request_id)
        head = [
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            "connection: close",
            f"x-request-id: {request_id}",
        ]
        if status == 503:
            head.append("retry-after: 1")
        return "\r\n".join(head).encode() + b"\r\n\r\n" + body

    def _warn_cap(self) -> None:
        now = time.monotonic()
        if now - self.bounds.last_cap_warning >= _CAP_WARNING_EVERY_S:
            self.bounds.last_cap_warning = now
            log.warning(
                "%d client connections open (security.max_connections): refusing new ones",
                len(self.connections),
            )
