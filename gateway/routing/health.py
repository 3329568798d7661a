"""Background health probing of every replica (GET /health on each engine)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import httpx

from gateway.routing.replica import Replica
from gateway.settings import HealthSettings

log = logging.getLogger("gateway.routing.health")


class HealthProber:
    def __init__(
        self,
        replicas: Sequence[Replica],
        client: httpx.AsyncClient,
        settings: HealthSettings,
        on_change: Callable[[Replica], None],
    ) -> None:
        self._replicas = list(replicas)
        self._client = client
        self._settings = settings
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None

    async def probe_all(self) -> None:
        await asyncio.gather(*(self._probe(replica) for replica in self._replicas))

    async def _probe(self, replica: Replica) -> None:
        refused = False
        try:
            response = await self._client.get(
                replica.base_url + self._settings.path, timeout=self._settings.timeout_s
            )
            ok = response.status_code == 200
        except httpx.ConnectError:
            ok, refused = False, True
        except httpx.HTTPError:
            ok = False
        self.record(replica, ok, refused=refused)

    def record(self, replica: Replica, ok: bool, *, refused: bool = False) -> None:
        was = replica.healthy
        if ok:
            replica.failures = 0
            replica.successes += 1
            if replica.successes >= self._settings.healthy_after:
                replica.healthy = True
        else:
            replica.successes = 0
            replica.failures += 1
            if refused or replica.failures >= self._settings.unhealthy_after:
                replica.healthy = False
        if replica.healthy != was:
            log.info("replica %s is now %s", replica.name, "up" if replica.healthy else "down")
        self._on_change(replica)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="health-prober")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.interval_s)
            await self.probe_all()
