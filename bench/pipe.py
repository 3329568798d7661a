"""`python -m bench.pipe --port P --upstream-port U`: the cheapest hop Python can be.

A TCP byte pipe on uvloop: each client connection gets its own upstream connection and bytes
are copied both ways as they arrive, with no HTTP parsing. `python -m bench overhead --floor`
puts it next to the gateway and smg: what it adds is what any Python hop pays for the extra
process, sockets and event loop, so the rest of a hop's figure is its own work.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import cast

import uvloop


class _Upstream(asyncio.Protocol):
    def __init__(self, client: _Client) -> None:
        self._client = client

    def data_received(self, data: bytes) -> None:
        self._client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._client.close()


class _Client(asyncio.Protocol):
    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self._transport: asyncio.Transport | None = None
        self._upstream: asyncio.Transport | None = None
        # What the client sent before the upstream connection was up.
        self._early: list[bytes] = []
        self._closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(
                lambda: _Upstream(self), self._host, self._port
            )
        except OSError:
            self.close()
            return
        self._upstream = upstream
        if self._closed:
            upstream.close()
            return
        for data in self._early:
            self._upstream.write(data)
        self._early.clear()

    def data_received(self, data: bytes) -> None:
        if self._upstream is None:
            self._early.append(data)
        else:
            self._upstream.write(data)

    def write(self, data: bytes) -> None:
        if self._transport is not None:
            self._transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.close()
        if self._upstream is not None:
            self._upstream.close()


async def serve(port: int, upstream_host: str, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Client(upstream_host, upstream_port), "127.0.0.1", port
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pipe", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-host", default="127.0.0.1")
    parser.add_argument("--upstream-port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.upstream_host, args.upstream_port))


if __name__ == "__main__":
    main()
