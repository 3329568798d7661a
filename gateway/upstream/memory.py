"""A network in memory beneath the wire pool: each connection's HTTP/1.1 requests are answered
by an httpx transport (an `httpx.MockTransport` in the gateway's tests).

Why: the in-process tests inject the engine as an httpx transport. Replacing the whole engine
client with it would leave the production pool (gateway.upstream.wire: connection slots,
keep-alive, release on every exit) untested, and a request path that forgets to give its
connection back would pass every test. Beneath the pool, the same transport is an engine the
pool connects to: the pool's bookkeeping runs as in production, bytes and all.

Scope: what the wire pool sends (POST with Content-Length) and what an engine answers (any
status, the body chunked, keep-alive). An `httpx.ConnectError` from the transport is a refused
connection; any other failure closes the connection, as a crashed engine would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httptools
import httpx

from gateway.upstream.wire import Connector

_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 503: b"Service Unavailable"}


class _Server(asyncio.Transport):
    """The client's end of one in-memory connection; its writes are the engine's reads."""

    def __init__(
        self, transport: httpx.AsyncBaseTransport, protocol: asyncio.Protocol, origin: str
    ) -> None:
        super().__init__()
        self._engine = transport
        self._protocol = protocol
        self._origin = origin
        self._closed = False
        self._readable = asyncio.Event()
        self._readable.set()
        self._requests: asyncio.Queue[httpx.Request] = asyncio.Queue()
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body = bytearray()
        self._task = asyncio.get_running_loop().create_task(self._serve())

    # -- httptools request callbacks -------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        method = self._parser.get_method().decode()
        request = httpx.Request(
            method, self._origin + self._url.decode(), headers=self._headers,
            content=bytes(self._body),
        )  # fmt: skip
        self._url, self._headers, self._body = b"", [], bytearray()
        self._requests.put_nowait(request)

    # -- asyncio.Transport, as the wire pool's connection uses it ---------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            return
        try:
            self._parser.feed_data(bytes(data))
        except httptools.HttpParserError:
            self.close()

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def pause_reading(self) -> None:
        self._readable.clear()

    def resume_reading(self) -> None:
        self._readable.set()

    def is_closing(self) -> bool:
        return self._closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def close(self) -> None:
        # The client hung up: what the engine was sending stops (the handler's stream is
        # closed, as a real engine sees its socket close).
        if self._closed:
            return
        self._closed = True
        self._task.cancel()
        asyncio.get_running_loop().call_soon(self._protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    # -- the engine's side -------------------------------------------------------------------

    def _deliver(self, data: bytes) -> None:
        if not self._closed:
            self._protocol.data_received(data)

    async def _serve(self) -> None:
        while not self._closed:
            request = await self._requests.get()
            try:
                response = await self._engine.handle_async_request(request)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                self._hang_up(ConnectionRefusedError(str(exc)))
                return
            except Exception:
                self._hang_up(None)
                return
            try:
                await self._answer(response)
            except Exception:
                self._hang_up(None)
                return
            finally:
                await response.aclose()

    async def _answer(self, response: httpx.Response) -> None:
        status = response.status_code
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Status"))]
        for name, value in response.headers.raw:
            if name.lower() not in (b"content-length", b"transfer-encoding"):
                head.append(name + b": " + value + b"\r\n")
        head.append(b"transfer-encoding: chunked\r\n\r\n")
        self._deliver(b"".join(head))
        stream = response.stream  # raw: a response built from bytes counts as already read
        assert isinstance(stream, httpx.AsyncByteStream)
        async for chunk in stream:
            if not chunk:
                continue
            await self._readable.wait()
            self._deliver(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            # As a network would, let the reader take each piece before the next arrives
            # (the engine's events are read one by one unless they came together).
            await asyncio.sleep(0)
        self._deliver(b"0\r\n\r\n")

    def _hang_up(self, error: Exception | None) -> None:
        if self._closed:
            return
        self._closed = True
        self._protocol.connection_lost(error)


def memory_network(transport: httpx.AsyncBaseTransport) -> Connector:
    """A connector for gateway.upstream.wire.WirePool whose engine is `transport`."""

    async def connect(
        factory: Callable[[], asyncio.Protocol], host: str, port: int
    ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
        protocol = factory()
        server = _Server(transport, protocol, f"http://{host}:{port}")
        protocol.connection_made(server)
        return server, protocol

    return connect
