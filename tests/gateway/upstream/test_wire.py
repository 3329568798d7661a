"""The lean engine HTTP client against a raw HTTP server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from gateway.upstream.wire import (
    WireConnectError,
    WireError,
    WirePool,
    WirePoolTimeout,
    WireReadTimeout,
)
from tests.support.procs import free_port

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Start = Callable[[Handler], Awaitable[str]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return await reader.readexactly(length)


def chunked(*pieces: bytes) -> bytes:
    out = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    for piece in pieces:
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
    return out + b"0\r\n\r\n"


@pytest.fixture
async def server() -> AsyncIterator[Start]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        srv = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(srv)
        port = srv.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/generate"

    yield start
    for srv in servers:
        srv.close()


def pool(**overrides: float) -> WirePool:
    settings: dict[str, float] = {
        "max_connections": 4,
        "max_idle": 4,
        "keepalive_expiry": 30.0,
        "connect_timeout": 2.0,
        "read_timeout": 5.0,
        "pool_timeout": 2.0,
        **overrides,
    }
    return WirePool(**settings)  # type: ignore[arg-type]


async def read_all(response: AsyncIterator[bytes]) -> bytes:
    return b"".join([piece async for piece in response])


async def test_streams_and_reuses_the_connection(
    server: Start,
) -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                body = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(chunked(b"data: 1\n\n", b"echo " + body))
            await writer.drain()

    url = await server(handler)
    wire = pool()
    for i in range(3):
        response = await wire.post(url, b'{"n": %d}' % i)
        assert response.status_code == 200
        assert await read_all(aiter(response)) == b'data: 1\n\necho {"n": %d}' % i
        await response.aclose()
    assert connections == 1
    wire.close()


async def test_a_large_body_arrives_whole_after_its_head(server: Start) -> None:
    received: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await read_request(reader))
        writer.write(chunked(b"ok"))
        await writer.drain()

    url = await server(handler)
    wire = pool()
    # Head and body go out as two buffers (not joined); the body is large enough to take
    # several writes on loopback.
    body = b'{"text":"x","image_data":["' + b"A" * (4 << 20) + b'"]}'
    response = await wire.post(url, body)
    assert await read_all(aiter(response)) == b"ok"
    await response.aclose()
    assert received == [body]
    wire.close()


async def test_refused_connection(server: Start) -> None:
    with pytest.raises(WireConnectError):
        await pool().post(f"http://127.0.0.1:{free_port()}/generate", b"{}")


async def test_stale_idle_connection_is_retried(
    server: Start,
) -> None:
    async def one_shot(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(chunked(b"ok"))
        await writer.drain()
        writer.close()  # closes its keep-alive connection right after answering

    url = await server(one_shot)
    wire = pool()
    for _ in range(2):
        response = await wire.post(url, b"{}")
        assert await read_all(aiter(response)) == b"ok"
        await response.aclose()
        await asyncio.sleep(0.05)
    wire.close()


async def test_read_timeout_and_broken_stream(server: Start) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.close()

    url = await server(silent)
    response = await pool(read_timeout=0.1).post(url, b"{}")
    chunks = aiter(response)
    assert await anext(chunks) == b"hello"
    with pytest.raises(WireReadTimeout):
        await anext(chunks)
    await response.aclose()
    response = await pool(read_timeout=5.0).post(url, b"{}")
    with pytest.raises(WireError, match="closed"):
        await read_all(aiter(response))
    await response.aclose()


async def test_pool_bound(server: Start) -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    url = await server(slow)
    wire = pool(max_connections=1, pool_timeout=0.1)
    first = await wire.post(url, b"{}")
    with pytest.raises(WirePoolTimeout):
        await wire.post(url, b"{}")
    await first.aclose()
    second = await wire.post(url, b"{}")
    await second.aclose()
    wire.close()


async def test_a_backlog_comes_back_as_one_piece(server: Start) -> None:
    # The engine sends one HTTP chunk per token; a reader that fell behind gets them joined.
    async def burst(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(chunked(b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"))
        await writer.drain()

    url = await server(burst)
    wire = pool()
    response = await wire.post(url, b"{}")
    await asyncio.sleep(0.1)  # everything has arrived before the first read
    assert await response.next_chunk() == b"data: 1\n\ndata: 2\n\ndata: 3\n\n"
    assert await response.next_chunk() is None
    await response.aclose()
    wire.close()


async def test_read_timeout_is_per_wait_across_many_reads(server: Start) -> None:
    # One timer serves every read of a connection: it must move with the reads, so a stream
    # that keeps talking outlives the timeout many times over, and silence still trips it.
    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(8):
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        writer.close()

    url = await server(trickle)
    wire = pool(read_timeout=0.2)
    response = await wire.post(url, b"{}")
    received = b""

    async def read_until_silence() -> None:
        nonlocal received
        while (piece := await response.next_chunk()) is not None:
            received += piece

    with pytest.raises(WireReadTimeout):
        await read_until_silence()
    assert received == b"x" * 8
    await response.aclose()
    wire.close()


async def test_the_request_id_travels_as_a_header(server: Start) -> None:
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            heads.append(head)
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(chunked(b"data: [DONE]\n\n"))
            await writer.drain()

    url = await server(handler)
    wire = pool()
    for request_id in ("client-7", None):
        response = await wire.post(url, b"{}", request_id)
        await read_all(aiter(response))
        await response.aclose()
    with pytest.raises(WireError, match="line break"):
        await wire.post(url, b"{}", "evil\r\nX-Injected: 1")
    wire.close()
    assert b"\r\nX-Request-Id: client-7\r\n" in heads[0]
    assert b"X-Request-Id" not in heads[1]
    assert len(heads) == 2
