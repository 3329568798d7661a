"""A MediaResolver with a fake DNS and an httpx.MockTransport: remote fetches without network."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from gateway.media import MediaResolver
from gateway.observability.metrics import Metrics
from gateway.settings import MediaRemoteSettings, MediaSettings

HOST = "img.example.com"
PUBLIC = "93.184.216.34"

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def endless_image(produced: list[int]) -> Handler:
    """A server whose image body never ends (64 KiB chunks, up to 655 MB); `produced` counts
    the chunks it was asked for, so a test can show the body was cut while streaming."""

    async def endless() -> AsyncIterator[bytes]:
        for index in range(10_000):
            produced.append(index)
            yield b"\0" * 65536

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "image/png"}, content=endless())

    return handler


class FakeDns:
    """Answers from a table; a host with several answers gives the next one on each lookup
    (the last one repeats), as a rebinding name server would."""

    def __init__(self, table: dict[str, list[list[str]]] | None = None) -> None:
        self.table = table if table is not None else {HOST: [[PUBLIC]]}
        self.lookups: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append((host, port))
        answers = self.table.get(host)
        if answers is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        index = min(sum(1 for seen, _ in self.lookups if seen == host) - 1, len(answers) - 1)
        return answers[index]


class Recorder:
    """The mock transport's side: every request it was asked to send."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.handler(request)


def image_response(body: bytes, content_type: str = "image/png", **headers: str) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": content_type, **headers}, content=body)


def serve(body: bytes, content_type: str = "image/png") -> Handler:
    async def handler(request: httpx.Request) -> httpx.Response:
        return image_response(body, content_type)

    return handler


def remote_settings(media: dict[str, Any] | None = None, **remote: Any) -> MediaSettings:
    fields: dict[str, Any] = {"enabled": True, "allowed_hosts": [HOST], **remote}
    return MediaSettings(remote=MediaRemoteSettings(**fields), **(media or {}))


@asynccontextmanager
async def resolver(
    settings: MediaSettings,
    handler: Handler | None = None,
    dns: FakeDns | None = None,
    metrics: Metrics | None = None,
) -> AsyncIterator[tuple[MediaResolver, Recorder, FakeDns]]:
    recorder = Recorder(handler or serve(b""))
    dns = dns or FakeDns()
    built = MediaResolver(
        settings,
        metrics or Metrics(process_metrics=False),
        transport=httpx.MockTransport(recorder),
        resolve_host=dns,
    )
    try:
        yield built, recorder, dns
    finally:
        await built.aclose()
