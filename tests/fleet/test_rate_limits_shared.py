"""Per-key rate limits on a real redis-server (gateway/ratelimit/shared.py): two limiters (as two
gateways) share one key's buckets, keys expire once refilled and never name the API key, and
a store that dies leaves each limiter enforcing the limits on its own traffic."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from bench.procs import RedisProc, start_redis
from gateway.observability.metrics import Metrics
from gateway.ratelimit import RateLimiter, key_id
from gateway.settings import RateLimitSettings, SharedStateSettings
from gateway.shared_state import SharedStore

# Generous: this box is shared and loaded (the default is 5 ms).
STATE = SharedStateSettings(timeout_s=0.5, retry_s=60.0)


class Gateway:
    """What one gateway holds: its store client, its metrics, its limiter."""

    def __init__(self, url: str, settings: RateLimitSettings) -> None:
        self.metrics = Metrics(process_metrics=False)
        self.store = SharedStore(url, STATE, self.metrics)
        self.limiter = RateLimiter(settings, self.metrics, self.store)

    async def allowed(self, key: str) -> bool:
        decision = await self.limiter.check(key)
        assert decision is not None
        return decision.allowed

    def checks(self, source: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "flashbox_rate_limit_checks_total", {"source": source}
        )
        return value or 0.0


@pytest.fixture
async def pair(redis_server: RedisProc) -> AsyncIterator[tuple[Gateway, Gateway]]:
    settings = RateLimitSettings(requests_per_minute=3, tokens_per_minute=100)
    a, b = Gateway(redis_server.url, settings), Gateway(redis_server.url, settings)
    try:
        yield a, b
    finally:
        await a.store.close()
        await b.store.close()


async def test_two_gateways_share_a_key_s_requests(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    key = key_id("sk-shared")
    assert [await a.allowed(key), await b.allowed(key), await a.allowed(key)] == [True] * 3
    decision = await b.limiter.check(key)
    assert decision is not None
    assert not decision.allowed
    assert decision.source == "shared"
    assert decision.verdict.exceeded == "requests"
    assert decision.retry_after in (19, 20)
    assert not await a.allowed(key)
    # Another key has its own buckets.
    assert await b.allowed(key_id("sk-other"))
    assert a.checks("local") == b.checks("local") == 0


async def test_tokens_charged_through_one_gateway_refuse_on_the_other(
    pair: tuple[Gateway, Gateway],
) -> None:
    a, b = pair
    key = key_id("sk-tokens")
    assert await a.allowed(key)
    await a.limiter.charge(key, 150)  # past the limit of 100 by half a minute
    decision = await b.limiter.check(key)
    assert decision is not None
    assert not decision.allowed
    assert decision.verdict.exceeded == "tokens"
    assert decision.retry_after in (29, 30)
    assert decision.verdict.used(decision.limits)[1] == 150


async def test_keys_expire_and_never_name_the_api_key(
    redis_server: RedisProc, pair: tuple[Gateway, Gateway]
) -> None:
    a, _ = pair
    await a.allowed(key_id("sk-secret-value"))
    await a.limiter.charge(key_id("sk-secret-value"), 10)
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        names = sorted(raw.keys("*"))
        assert names == [
            f"flashbox:ratelimit:{key_id('sk-secret-value')}:requests",
            f"flashbox:ratelimit:{key_id('sk-secret-value')}:tokens",
        ]
        # Each lives only until its bucket is full again: 20 s for a request of 3 a minute,
        # 6 s for 10 tokens of 100.
        assert 19_000 < raw.pttl(names[0]) <= 20_000
        assert 5_000 < raw.pttl(names[1]) <= 6_000
    finally:
        raw.close()


async def test_a_dead_store_leaves_each_gateway_its_own_traffic(redis_server: RedisProc) -> None:
    settings = RateLimitSettings(requests_per_minute=3)
    a, b = Gateway(redis_server.url, settings), Gateway(redis_server.url, settings)
    key = key_id("sk-fallback")
    try:
        # Shared: a serves two, b one; the key is at its limit fleet-wide.
        assert [await a.allowed(key), await a.allowed(key), await b.allowed(key)] == [True] * 3
        assert not await a.allowed(key)
        redis_server.kill()
        # Each gateway now counts what it served itself: a has served 2 of 3, b 1 of 3.
        assert [await a.allowed(key), await a.allowed(key)] == [True, False]
        assert [await b.allowed(key), await b.allowed(key), await b.allowed(key)] == [
            True,
            True,
            False,
        ]
        assert a.checks("local") == 2
        assert b.checks("local") == 3
        refused = a.metrics.registry.get_sample_value(
            "flashbox_rate_limited_total", {"limit": "requests", "source": "local"}
        )
        assert refused == 1
    finally:
        await a.store.close()
        await b.store.close()


async def test_the_store_back_means_shared_limits_again(redis_server: RedisProc) -> None:
    settings = RateLimitSettings(requests_per_minute=2)
    metrics = Metrics(process_metrics=False)
    now = [0.0]
    store = SharedStore(
        redis_server.url, SharedStateSettings(timeout_s=0.5, retry_s=1.0), metrics, lambda: now[0]
    )
    limiter = RateLimiter(settings, metrics, store)
    try:
        redis_server.kill()
        decision = await limiter.check("k")
        assert decision is not None
        assert decision.source == "local"
        back = start_redis(port=redis_server.port)
        try:
            now[0] += 1.0
            decision = await limiter.check("k")
            assert decision is not None
            assert decision.source == "shared"
        finally:
            back.stop()
    finally:
        await store.close()
