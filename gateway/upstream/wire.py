"""A lean HTTP/1.1 client for the engine's streamed responses: asyncio protocol + httptools.

Why not httpx on this path: the gateway relays one small HTTP chunk per generated token, and
httpx's stack (httpcore, h11, anyio cancel scopes) costs more CPU per chunk than everything
else the gateway does with it (measured in bench/overhead.py). Here a chunk costs one C parser
callback and one deque append. Scope is deliberately small: POST with a JSON body, plain
HTTP on a trusted network, keep-alive pooling with explicit bounds, and timeouts for connect,
pool wait and each read. httpx still serves control calls and any injected test transport.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeAlias, cast
from urllib.parse import urlsplit

import httptools

# Reading pauses when this much body is buffered and not yet consumed (back-pressure).
_HIGH_WATER = 4 * 1024 * 1024
# uvloop's timers run on a millisecond grid and may fire this much before their time.
_TIMER_SLACK = 0.001


class WireError(Exception):
    """Base class; the message says what happened."""


class WireConnectError(WireError):
    pass


class WirePoolTimeout(WireError):
    pass


class WireReadTimeout(WireError):
    pass


# Opens a connection to (host, port) with the protocol the factory makes, as
# loop.create_connection does: the network under the pool. Tests inject an in-memory one
# (gateway.upstream.memory) so that the production pool runs in every in-process test.
Connector: TypeAlias = Callable[
    [Callable[[], asyncio.Protocol], str, int],
    Awaitable[tuple[asyncio.BaseTransport, asyncio.Protocol]],
]


class _Connection(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop, key: tuple[str, int]) -> None:
        self._loop = loop
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.last_used = 0.0
        # The read timer: one per connection, see _wait.
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._wait_until = 0.0
        self._reset()

    def _reset(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.keep_alive = True
        self.complete = False
        self.got_bytes = False
        self.error: WireError | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._headers_done = False
        self._waiter: asyncio.Future[None] | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(WireError(f"malformed HTTP response from the engine: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if isinstance(exc, ConnectionRefusedError):
            # An in-memory network's way to say the engine is not there (a socket's refusal
            # comes from create_connection instead): the request never reached an engine.
            self._fail(WireConnectError(f"the engine refused the connection: {exc}"))
        elif not self.complete:
            self._fail(WireError("the engine closed the connection mid-response"))

    # -- httptools callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"connection" and value.lower() == b"close":
            self.keep_alive = False

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self.keep_alive and self._parser.should_keep_alive()
        self._headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        # Once per token: _wake inlined.
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # -- used by the pool and the response --------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: WireError) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    def send(self, data: list[bytes]) -> None:
        self._reset()
        assert self.transport is not None
        self.transport.writelines(data)

    async def _wait(self, seconds: float) -> None:
        # One timer per connection, moved only when a wait must end before it fires: arming
        # and cancelling a timer for every token cost more than the rest of the read. A timer
        # that fires before the current wait's end arms itself again (_timed_out).
        loop = self._loop
        until = self._wait_until = loop.time() + seconds
        if self._timer is None or self._timer_at > until:
            self._arm(until)
        waiter = self._waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self._timed_out)
        self._timer_at = when

    def _timed_out(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # not waiting now: the next wait arms the timer again
        if self._loop.time() < self._wait_until - _TIMER_SLACK:
            self._arm(self._wait_until)
            return
        waiter.set_exception(WireReadTimeout("the engine sent nothing within the read timeout"))

    async def headers(self, seconds: float) -> int:
        while not self._headers_done:
            if self.error is not None:
                raise self.error
            await self._wait(seconds)
        return self.status

    async def read(self, seconds: float) -> bytes | None:
        """All body received and not yet read, or None at its end.

        Everything buffered comes back at once: the engine sends one HTTP chunk per token,
        and when this reader falls behind, the reader (gateway.upstream.stream) handles a whole
        backlog as one event, which is how a busy gateway catches up instead of falling
        further behind.
        """
        while True:
            chunks = self._chunks
            if chunks:
                data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                self._buffered = 0
                if self._paused and self.transport:
                    self._paused = False
                    self.transport.resume_reading()
                return data
            if self.complete:
                return None
            if self.error is not None:
                raise self.error
            await self._wait(seconds)

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.close()


class WireResponse:
    """A response whose body is read piece by piece; `aclose()` returns the connection."""

    def __init__(self, pool: WirePool, conn: _Connection, status_code: int) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self.status_code = status_code
        # Set by the reader: the event-loop time by which the next piece must arrive (its
        # first-token / idle deadlines), folded into the read's own timer: no second timer.
        self.deadline: Callable[[], float | None] | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (data := await self.next_chunk()) is not None:
            yield data

    async def next_chunk(self) -> bytes | None:
        """The next piece of body, or None at its end (no async generator per piece)."""
        conn = self._conn
        if conn is None:
            return None
        seconds = self._pool.read_timeout
        if self.deadline is not None and (deadline := self.deadline()) is not None:
            seconds = min(seconds, deadline - conn._loop.time())
        return await conn.read(seconds)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(conn)


class WirePool:
    """Keep-alive connections per engine, at most `max_connections` in use at once."""

    def __init__(
        self,
        *,
        max_connections: int,
        max_idle: int,
        keepalive_expiry: float,
        connect_timeout: float,
        read_timeout: float,
        pool_timeout: float,
        connect: Connector | None = None,
    ) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._connector = connect
        self._in_use = 0
        self._max_idle = max_idle
        self._expiry = keepalive_expiry
        self._connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._pool_timeout = pool_timeout
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._targets: dict[str, tuple[str, int, bytes]] = {}

    @property
    def in_use(self) -> int:
        """Connections taken by a request and not given back yet (flashbox_upstream_connections
        _in_use; 0 whenever no request runs, or one leaked)."""
        return self._in_use

    def _target(self, url: str) -> tuple[str, int, bytes]:
        target = self._targets.get(url)
        if target is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or parts.hostname is None:
                raise WireError(f"only plain http:// engine URLs are supported here: {url}")
            port = parts.port or 80
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            ).encode()
            target = self._targets[url] = (parts.hostname, port, head)
        return target

    async def post(
        self, url: str, body: bytes, request_id: str | None = None, traceparent: str | None = None
    ) -> WireResponse:
        """POST `body` as JSON; `request_id` becomes an x-request-id header, `traceparent` (the
        gateway's own, 55 ASCII characters) a traceparent header."""
        host, port, head = self._target(url)
        if request_id is not None:
            header = request_id.encode("ascii", "replace")
            if b"\r" in header or b"\n" in header:
                raise WireError("a request id may not hold a line break")
            head += b"X-Request-Id: " + header + b"\r\n"
        if traceparent is not None:
            head += b"traceparent: " + traceparent.encode("ascii") + b"\r\n"
        if self._slots.locked():
            try:
                await asyncio.wait_for(self._slots.acquire(), self._pool_timeout)
            except TimeoutError as exc:
                raise WirePoolTimeout("no free connection to the engine in time") from exc
        else:
            await self._slots.acquire()  # free slot: returns at once, no task
        self._in_use += 1
        # Head and body are written together (one writev), not joined: a body with images is
        # megabytes, and one more copy of it costs the event loop milliseconds (page faults
        # of fresh memory, most of it: measured 3-4 ms for a 1080p PNG on a VM).
        request = [head + b"Content-Length: %d\r\n\r\n" % len(body), body]
        conn: _Connection | None = None
        try:
            conn, reused = await self._connection(host, port)
            conn.send(request)
            try:
                status = await conn.headers(self.read_timeout)
            except WireError:
                if not (reused and not conn.got_bytes):
                    raise
                # The engine had closed this idle connection: the request never reached it.
                conn.close()
                conn = await self._connect(host, port)
                conn.send(request)
                status = await conn.headers(self.read_timeout)
        except BaseException:
            self._give_back()
            if conn is not None:
                conn.close()
            raise
        return WireResponse(self, conn, status)

    async def _connection(self, host: str, port: int) -> tuple[_Connection, bool]:
        idle = self._idle.get((host, port))
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.last_used < self._expiry:
                return conn, True
            conn.close()
        return await self._connect(host, port), False

    async def _connect(self, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        connect = self._connector or loop.create_connection
        try:
            _, protocol = await asyncio.wait_for(
                connect(lambda: _Connection(loop, (host, port)), host, port),
                self._connect_timeout,
            )
            conn = cast(_Connection, protocol)
        except TimeoutError as exc:
            raise WireConnectError(f"connecting to {host}:{port} timed out") from exc
        except OSError as exc:
            raise WireConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        return conn

    def _give_back(self) -> None:
        self._in_use -= 1
        self._slots.release()

    def release(self, conn: _Connection) -> None:
        self._give_back()
        if conn.complete and conn.keep_alive and not conn.closed and conn.error is None:
            conn.last_used = time.monotonic()
            idle = self._idle.setdefault(conn.key, [])
            if len(idle) < self._max_idle:
                idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
