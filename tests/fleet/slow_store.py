"""A loopback TCP proxy in front of a real redis-server that holds what passes through it a
settable while: a slow store on demand, so a test can cancel a request while one of the
picker's round trips is out. It runs on the test's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable


class SlowStore:
    def __init__(self, port: int) -> None:
        self._port = port
        # Seconds each chunk is held before it goes on, each way; set by the test at any time.
        self.to_store_s = 0.0
        self.to_client_s = 0.0
        # Chunks held now, each way.
        self.held_to_store = 0
        self.held_to_client = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._pumps: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # The pumps, not the connections' own tasks: asyncio's server logs a cancelled one.
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        store_r, store_w = await asyncio.open_connection("127.0.0.1", self._port)
        up = asyncio.create_task(self._pump(client_r, store_w, self._to_store))
        down = asyncio.create_task(self._pump(store_r, client_w, self._to_client))
        self._pumps |= {up, down}
        try:
            # Either side closing ends both, and what was still held is dropped: bytes a
            # client sent just before it cut the connection never reach the store.
            await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in (up, down):
                pump.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            self._pumps -= {up, down}
            for writer in (store_w, client_w):
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            self._connections.discard(task)

    def _to_store(self, held: int) -> float:
        self.held_to_store += held
        return self.to_store_s

    def _to_client(self, held: int) -> float:
        self.held_to_client += held
        return self.to_client_s

    @staticmethod
    async def _pump(
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        hold: Callable[[int], float],
    ) -> None:
        """Reads at once (so a closed source is seen while a chunk is held) and passes each
        chunk on, in order, once its hold is over."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def forward() -> None:
            while True:
                due, chunk = await queue.get()
                try:
                    await asyncio.sleep(max(0.0, due - loop.time()))
                    sink.write(chunk)
                    await sink.drain()
                finally:
                    hold(-1)

        forwarder = asyncio.create_task(forward())
        try:
            while chunk := await source.read(65536):
                queue.put_nowait((loop.time() + hold(1), chunk))
        finally:
            forwarder.cancel()
            await asyncio.gather(forwarder, return_exceptions=True)
            while not queue.empty():
                queue.get_nowait()
                hold(-1)


@contextlib.asynccontextmanager
async def slow_store(port: int) -> AsyncIterator[SlowStore]:
    proxy = SlowStore(port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
