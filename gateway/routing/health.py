"""Background health probing of every replica (GET /health on each engine).

SGLang's /health answers 503 while a long CPU prefill keeps its detokenizer silent for 20 s, and
a 60k-token prefill takes minutes. So a 503 or a timed-out probe from a replica this gateway has
requests open on counts as "busy", not as a failure, for up to `busy_grace_s`; a refused
connection always counts, and a replica that fails requests is caught by its circuit breaker.

A replica that comes up (again) is asked for its /server_info once: its checkpoint slots, track
interval and running-request bound size its session budget (gateway.routing.capacity).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

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
        server_info_path: str | None = None,
        busy_grace_s: float = 0.0,
        model_info_path: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Kept by reference: replicas added later (discovery) are probed too.
        self._replicas = replicas
        self._server_info_path = server_info_path
        self._model_info_path = model_info_path
        self._busy_grace_s = busy_grace_s
        self._clock = clock
        self._client = client
        self._settings = settings
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None
        # Called after a replica's /server_info was read (the media stage follows its bounds).
        self.on_info: Callable[[], None] | None = None

    async def probe_all(self) -> None:
        # A replica that left discovery is not probed: it must not come back up by itself.
        await asyncio.gather(*(self._probe(r) for r in self._replicas if not r.gone))

    async def _probe(self, replica: Replica) -> None:
        refused = busy = False
        try:
            response = await self._client.get(
                replica.base_url + self._settings.path, timeout=self._settings.timeout_s
            )
            ok = response.status_code == 200
            busy = response.status_code == 503
        except httpx.ConnectError:
            ok, refused = False, True
        except httpx.TimeoutException:
            ok, busy = False, True
        except httpx.HTTPError:
            ok = False
        if replica.gone:
            # It left discovery while the probe was out (discovery marked it down already).
            return
        if busy and replica.in_flight > 0:
            if self._within_grace(replica):
                return
        else:
            replica.busy_since = None
        self.record(replica, ok, refused=refused)
        if ok and not replica.info_loaded and self._server_info_path is not None:
            await self._load_info(replica, self._server_info_path)

    def _within_grace(self, replica: Replica) -> bool:
        now = self._clock()
        if replica.busy_since is None:
            replica.busy_since = now
        return now - replica.busy_since < self._busy_grace_s

    async def _load_info(self, replica: Replica, path: str) -> None:
        try:
            response = await self._client.get(
                replica.base_url + path, timeout=self._settings.timeout_s
            )
            info: Any = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return
        replica.info_loaded = True
        if not isinstance(info, dict):
            return
        replica.checkpoint_slots = _positive(info.get("max_mamba_cache_size"))
        replica.track_interval = _positive(info.get("mamba_track_interval"))
        replica.max_running_requests = _positive(info.get("max_running_requests"))
        replica.context_length = _positive(info.get("context_length"))
        replica.max_input_tokens = _positive(info.get("max_req_input_len"))
        replica.image_max_pixels = image_max_pixels(info)
        replica.max_images = _positive(
            _json_field(info.get("limit_mm_data_per_request")).get("image")
        )
        if self._model_info_path is not None:
            replica.accepts_images = await self._accepts_images(replica, self._model_info_path)
        if self.on_info is not None:
            self.on_info()

    async def _accepts_images(self, replica: Replica, path: str) -> bool | None:
        """/model_info's `has_image_understanding` (None: unknown, images are not refused)."""
        try:
            response = await self._client.get(
                replica.base_url + path, timeout=self._settings.timeout_s
            )
            info: Any = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return None
        value = info.get("has_image_understanding") if isinstance(info, dict) else None
        return value if isinstance(value, bool) else None

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
                # It may come back with another configuration.
                replica.info_loaded = False
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


def image_max_pixels(info: dict[str, Any]) -> int | None:
    """The engine's own image bound from its /server_info (None: it reports none)."""
    image = _json_field(info.get("mm_process_config")).get("image")
    return _positive(image.get("max_pixels")) if isinstance(image, dict) else None


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _json_field(value: Any) -> dict[str, Any]:
    """A server-info field SGLang reports as a dict or as the JSON text it was given."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}
