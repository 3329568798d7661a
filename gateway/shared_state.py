"""The shared state store: one Redis-protocol server (Valkey or Redis) for a fleet of gateways.

`state_url` names it; unset, there is no store and every gateway keeps its state in process
(a single workstation needs nothing more). Set, the gateways share what must agree across them
(docs/fleet.md): pins of sessions, lineages and prompt heads, checkpoint budgets, the Responses
store, per-key rate limits.

The store must never be a single point of failure, nor a wait: every round trip goes through
`SharedStore.run`, which bounds it by `state.timeout_s` (a few milliseconds), and on a timeout,
a refused connection or an error answer returns None and counts it in
flashbox_state_errors_total{kind}. Callers then decide on their local state. A refused
connection, an error answer, or `state.timeouts_before_skip` timeouts in a row set
flashbox_state_up to 0 and skip the store for `state.retry_s` (so a dead store costs a timeout
or two per retry_s, not one per request). A lone timeout does not: on a loaded host it is most
often this gateway's own event loop or a descheduled process that was late, and a second of
placements made without the store is what lets two gateways disagree (docs/fleet.md). The
first round trip that succeeds after a skip sets flashbox_state_up back to 1.

The bound covers the wait for a connection: at most `state.max_connections` calls are in
flight, and one that times out before its turn is never sent. A connection opened for a call
gets at least that call's bound: a burst on a cold pool opens one per call, all at once on one
event loop, so a shorter connect bound failed calls that still had time (docs/fleet.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.observability.metrics import Metrics
from gateway.settings import SharedStateSettings

log = logging.getLogger("gateway.shared_state")

T = TypeVar("T")


class SharedStore:
    def __init__(
        self,
        url: str,
        settings: SharedStateSettings,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.prefix = settings.key_prefix
        # Also what else talks to the store counts with (gateway.routing.moves).
        self.metrics = metrics
        self._clock = clock
        # redis-py's own socket timeouts bound a stuck connection; `run` bounds each call.
        read_s = max(settings.timeout_s * 20, 0.1)
        # `_slots`, not the pool, makes `run`'s calls wait for a connection: Python 3.11's
        # asyncio.Condition, which BlockingConnectionPool waits on, loses the wake-up of a waiter
        # cancelled (its call timed out) just as a connection frees, and the next waiter sleeps
        # beside that free connection until its own timeout; a Semaphore passes the wake-up on.
        # Each call holds one connection at a time, so the pool never waits for them; blocking,
        # it makes a direct user of `client` (the scripts' loading at start) wait, not fail.
        self._slots = asyncio.Semaphore(settings.max_connections)
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=settings.max_connections,
            timeout=read_s,
            socket_timeout=read_s,
            socket_connect_timeout=max(settings.connect_timeout_s, settings.timeout_s),
            health_check_interval=0,
            retry_on_timeout=False,
        )
        self.client: aioredis.Redis = aioredis.Redis.from_pool(pool)  # owns and closes the pool
        self._url = url
        self._skip_until = 0.0
        self._timeouts = 0  # in a row
        self.up = True
        metrics.state_up.set(1)

    def subscriber(self) -> aioredis.Redis:
        """A client of its own for a subscription (gateway.routing.moves), outside the pool
        and its bound on calls in flight. It never reconnects by itself: the subscriber
        must know when it may have missed a message."""
        return aioredis.Redis.from_url(
            self._url,
            socket_connect_timeout=max(self.settings.connect_timeout_s, self.settings.timeout_s),
            health_check_interval=0,
            retry=Retry(NoBackoff(), 0),
        )

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    @property
    def available(self) -> bool:
        """False while the store is skipped after a failure (see the module docstring)."""
        return self._clock() >= self._skip_until

    async def run(self, op: str, call: Callable[[aioredis.Redis], Awaitable[T]]) -> T | None:
        """`call(client)` within the timeout; None when it failed or the store is skipped."""
        if not self.available:
            return None
        started = time.perf_counter()
        try:
            # A call cut short mid-command gives its slot back; redis-py closes its connection
            # rather than leave the answer unread for the next caller.
            async with asyncio.timeout(self.settings.timeout_s), self._slots:
                result = await call(self.client)
        except (TimeoutError, RedisTimeoutError):
            self._failed("timeout", op)
            return None
        except (RedisConnectionError, OSError):
            self._failed("connection", op)
            return None
        except RedisError as exc:
            log.warning("shared store: %s answered an error: %s", op, exc)
            self._failed("error", op)
            return None
        self.metrics.state_seconds.labels(op=op).observe(time.perf_counter() - started)
        self._timeouts = 0
        if not self.up:
            self.up = True
            self.metrics.state_up.set(1)
            log.info("shared store is back: shared state resumes")
        return result

    def _failed(self, kind: str, op: str) -> None:
        self.metrics.state_errors.labels(kind=kind).inc()
        if kind == "timeout":
            self._timeouts += 1
            if self._timeouts < self.settings.timeouts_before_skip:
                log.info("shared store: %s timed out; the next round trip tries again", op)
                return
        self._timeouts = 0
        self._skip_until = self._clock() + self.settings.retry_s
        if self.up:
            self.up = False
            self.metrics.state_up.set(0)
            log.warning(
                "shared store unreachable (%s on %s): routing on local state; retrying in %.1fs",
                kind,
                op,
                self.settings.retry_s,
            )

    async def close(self) -> None:
        await self.client.aclose()
