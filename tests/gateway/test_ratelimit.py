"""Per-key rate limits (gateway/ratelimit): the buckets' rule, Retry-After, per-key overrides,
bounded memory, the headers, with an injected clock; and through the app in process (429 in
each face's shape, tokens charged from a finished request's usage)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.faces.anthropic.errors import limit_headers as anthropic_headers
from gateway.observability.metrics import Metrics
from gateway.ratelimit import Limits, LocalBuckets, RateLimiter, judge, key_id
from gateway.ratelimit.headers import duration, openai_limit_headers
from gateway.ratelimit.limiter import Decision, presented_key
from gateway.settings import KeyRateLimits, RateLimitSettings, Settings
from tests.gateway.conftest import MODEL, chat_body, gateway_client
from tests.gateway.fake_engine import FakeEngine
from tests.support.clock import Clock


def limiter(clock: Clock, **settings: Any) -> RateLimiter:
    return RateLimiter(
        RateLimitSettings(**settings), Metrics(process_metrics=False), None, clock=clock
    )


# -- the rule ---------------------------------------------------------------------------------


def test_n_requests_at_once_fit_and_the_next_waits_a_share_of_the_minute() -> None:
    clock = Clock()
    buckets = LocalBuckets(10, clock)
    limits = Limits(requests_per_minute=3, tokens_per_minute=0)
    for n in range(3):
        verdict = buckets.check("k", limits)
        assert verdict.allowed, n
        assert verdict.remaining(limits)[0] == 2 - n
    refused = buckets.check("k", limits)
    assert not refused.allowed
    assert refused.exceeded == "requests"
    assert refused.retry_after_s == pytest.approx(20.0)
    # The refusal took nothing: after 20 s exactly one more fits.
    clock.now += 20.0
    assert buckets.check("k", limits).allowed
    assert not buckets.check("k", limits).allowed
    # A full minute of quiet and the bucket is full again.
    clock.now += 60.0
    assert [buckets.check("k", limits).allowed for _ in range(4)] == [True, True, True, False]


def test_tokens_are_charged_after_the_fact_and_refuse_once_at_the_limit() -> None:
    clock = Clock()
    buckets = LocalBuckets(10, clock)
    limits = Limits(requests_per_minute=0, tokens_per_minute=1000)
    assert buckets.check("k", limits).allowed
    buckets.charge("k", limits, 999)
    assert buckets.check("k", limits).allowed  # under the limit: may go over
    buckets.charge("k", limits, 501)  # 1500 tokens: half a minute of debt past the limit
    refused = buckets.check("k", limits)
    assert not refused.allowed
    assert refused.exceeded == "tokens"
    assert refused.retry_after_s == pytest.approx(30.0)
    assert refused.used(limits)[1] == 1500
    clock.now += 30.0
    assert not buckets.check("k", limits).allowed  # at the limit, not under it yet
    clock.now += 0.01
    assert buckets.check("k", limits).allowed
    assert buckets.check("k", limits).remaining(limits)[1] == 0


def test_at_exactly_the_token_limit_a_request_is_refused() -> None:
    clock = Clock()
    buckets = LocalBuckets(10, clock)
    limits = Limits(requests_per_minute=0, tokens_per_minute=600)
    buckets.charge("k", limits, 600)
    refused = buckets.check("k", limits)
    assert not refused.allowed
    assert refused.retry_after_s == pytest.approx(0.0)
    clock.now += 0.1  # 6 tokens have refilled
    assert buckets.check("k", limits).allowed


def test_when_both_limits_are_hit_retry_after_is_the_later() -> None:
    limits = Limits(requests_per_minute=2, tokens_per_minute=100)
    verdict = judge(limits, requests_backlog_s=60.0, tokens_backlog_s=100.0)
    assert verdict.exceeded == "tokens"
    assert verdict.retry_after_s == pytest.approx(40.0)
    verdict = judge(limits, requests_backlog_s=60.0, tokens_backlog_s=61.0)
    assert verdict.exceeded == "requests"
    assert verdict.retry_after_s == pytest.approx(30.0)


def test_keys_have_their_own_buckets() -> None:
    clock = Clock()
    buckets = LocalBuckets(10, clock)
    limits = Limits(requests_per_minute=1, tokens_per_minute=0)
    assert buckets.check("a", limits).allowed
    assert not buckets.check("a", limits).allowed
    assert buckets.check("b", limits).allowed


# -- bounded memory -----------------------------------------------------------------------------


def test_at_most_max_keys_are_kept_and_the_least_recent_is_forgotten() -> None:
    clock = Clock()
    buckets = LocalBuckets(3, clock)
    limits = Limits(requests_per_minute=1, tokens_per_minute=0)
    for name in ("a", "b", "c"):
        assert buckets.check(name, limits).allowed
    assert not buckets.check("a", limits).allowed  # a is now the most recent
    assert buckets.check("d", limits).allowed
    assert len(buckets) == 3
    # b was forgotten: its bucket is full again; a was kept.
    assert buckets.check("b", limits).allowed
    assert not buckets.check("a", limits).allowed


def test_refilled_keys_are_dropped_as_the_map_is_used() -> None:
    clock = Clock()
    buckets = LocalBuckets(1000, clock)
    limits = Limits(requests_per_minute=60, tokens_per_minute=0)
    for n in range(100):
        buckets.check(f"k{n}", limits)
    assert len(buckets) == 100
    clock.now += 2.0  # every bucket is full again after 1 s
    for _ in range(100):
        buckets.check("active", limits)
        clock.now += 1.0
    assert len(buckets) == 1


# -- the limiter: overrides, identity, decisions --------------------------------------------------


async def test_per_key_overrides_and_defaults() -> None:
    clock = Clock()
    fast, free, half = key_id("fast-key"), key_id("free-key"), key_id("half-key")
    rl = limiter(
        clock,
        requests_per_minute=2,
        tokens_per_minute=1000,
        keys={
            fast: KeyRateLimits(requests_per_minute=5),
            free: KeyRateLimits(requests_per_minute=0, tokens_per_minute=0),
            half: KeyRateLimits(tokens_per_minute=0),
        },
    )
    assert rl.enabled
    assert rl.limits_for(fast) == Limits(5, 1000)  # unset: the default
    assert rl.limits_for(half) == Limits(2, 0)
    assert rl.limits_for("someone") == Limits(2, 1000)
    assert await rl.check(free) is None  # unlimited: nothing counted, nothing to say
    allowed = [(await rl.check(fast)) for _ in range(6)]
    assert [d is not None and d.allowed for d in allowed] == [True] * 5 + [False]
    default = [(await rl.check("someone")) for _ in range(3)]
    assert [d is not None and d.allowed for d in default] == [True, True, False]


async def test_off_by_default_and_with_only_zero_limits() -> None:
    assert not limiter(Clock()).enabled
    zero = KeyRateLimits(requests_per_minute=0, tokens_per_minute=0)
    assert not limiter(Clock(), keys={key_id("k"): zero}).enabled
    assert limiter(Clock(), keys={key_id("k"): KeyRateLimits(tokens_per_minute=5)}).enabled


async def test_a_refusal_says_the_limit_and_when_to_retry_in_openai_words() -> None:
    clock = Clock()
    rl = limiter(clock, requests_per_minute=3)
    who = key_id("secret-key")
    for _ in range(3):
        await rl.check(who)
    decision = await rl.check(who)
    assert decision is not None
    assert not decision.allowed
    assert decision.retry_after == 20
    error = decision.error()
    assert error.status_code == 429
    body = error.to_body()["error"]
    assert body["type"] == "requests"
    assert body["code"] == "rate_limit_exceeded"
    assert body["param"] is None
    assert body["message"] == (
        f"Rate limit reached for API key {who} on requests per min (RPM): Limit 3, Used 3, "
        "Requested 1. Please try again in 20s."
    )
    assert "secret-key" not in body["message"]


async def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one() -> None:
    clock = Clock()
    rl = limiter(clock, tokens_per_minute=60)
    await rl.check("k")
    await rl.charge("k", 60)
    decision = await rl.check("k")
    assert decision is not None
    assert decision.retry_after == 1  # due now: still 1 s, never 0
    await rl.charge("k", 3)  # 3.0 s more
    clock.now += 0.5
    decision = await rl.check("k")
    assert decision is not None
    assert decision.retry_after == 3  # 2.5 s, rounded up
    assert decision.error().to_body()["error"]["type"] == "tokens"


def test_key_ids_are_a_prefix_of_the_sha256_and_keys_are_read_as_auth_reads_them() -> None:
    assert key_id("sk-test") == hashlib.sha256(b"sk-test").hexdigest()[:12]
    assert presented_key("Bearer  sk-1 ", None) == "sk-1"
    assert presented_key(None, " sk-2 ") == "sk-2"
    assert presented_key("Bearer sk-1", "sk-2") == "sk-1"
    assert presented_key("Basic abc", None) is None
    scope: dict[str, Any] = {"client": ("10.0.0.7", 5555)}
    assert RateLimiter.identify(scope, True, "Bearer sk-1", None) == key_id("sk-1")
    # No authentication: the address, whatever key a client sends.
    assert RateLimiter.identify(scope, False, "Bearer sk-1", None) == "addr:10.0.0.7"
    assert RateLimiter.identify({"client": None}, False, None, None) is None


def test_override_names_must_be_key_ids_or_addresses_never_keys() -> None:
    RateLimitSettings(keys={"0123456789ab": KeyRateLimits(), "addr:10.1.2.3": KeyRateLimits()})
    RateLimitSettings(keys={"addr:2001:db8::1": KeyRateLimits()})
    for bad in ("sk-live-0123456789abcdef", "0123456789AB", "addr:not-an-ip", "0123"):
        with pytest.raises(ValidationError, match=r"rate_limits\.keys"):
            Settings(rate_limits={"keys": {bad: {}}})


# -- headers ----------------------------------------------------------------------------------


def test_durations_as_openai_writes_them() -> None:
    assert duration(0.0174) == "17ms"
    assert duration(1.0) == "1s"
    assert duration(7.66) == "7.66s"
    assert duration(60.0) == "1m0s"
    assert duration(360.0) == "6m0s"
    assert duration(90.5) == "1m30.5s"


def _decision(limits: Limits, requests_backlog: float, tokens_backlog: float) -> Decision:
    return Decision("k", limits, judge(limits, requests_backlog, tokens_backlog), "local")


def test_openai_headers_describe_only_the_limits_a_key_has() -> None:
    headers = dict(openai_limit_headers(_decision(Limits(3, 0), 0.0, 0.0)))
    assert headers == {
        b"x-ratelimit-limit-requests": b"3",
        b"x-ratelimit-remaining-requests": b"2",
        b"x-ratelimit-reset-requests": b"20s",
    }
    headers = dict(openai_limit_headers(_decision(Limits(0, 1000), 0.0, 15.0)))
    assert headers == {
        b"x-ratelimit-limit-tokens": b"1000",
        b"x-ratelimit-remaining-tokens": b"750",
        b"x-ratelimit-reset-tokens": b"15s",
    }


def test_anthropic_headers() -> None:
    headers = dict(anthropic_headers(_decision(Limits(60, 1000), 0.0, 30.0)))
    assert headers[b"anthropic-ratelimit-requests-limit"] == b"60"
    assert headers[b"anthropic-ratelimit-requests-remaining"] == b"59"
    assert headers[b"anthropic-ratelimit-tokens-remaining"] == b"500"
    assert headers[b"anthropic-ratelimit-tokens-reset"].endswith(b"Z")


# -- through the app, in process ----------------------------------------------------------------

KEY, OTHER = "sk-rate-1", "sk-rate-2"


async def test_429_in_each_face_s_shape_and_another_key_unaffected(engine: FakeEngine) -> None:
    limits = {"requests_per_minute": 2}
    async with gateway_client(engine, api_keys=[KEY, OTHER], rate_limits=limits) as client:
        mine = {"authorization": f"Bearer {KEY}"}
        first = await client.post("/v1/chat/completions", json=chat_body(), headers=mine)
        assert first.status_code == 200
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        body = {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        second = await client.post("/v1/messages", json=body, headers={"x-api-key": KEY})
        assert second.status_code == 200
        assert second.headers["anthropic-ratelimit-requests-remaining"] == "0"

        refused = await client.post("/v1/chat/completions", json=chat_body(), headers=mine)
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) in range(29, 31)
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")

        refused = await client.post("/v1/messages", json=body, headers={"x-api-key": KEY})
        assert refused.status_code == 429
        assert "retry-after" in refused.headers
        answer = refused.json()
        assert answer["type"] == "error"
        assert answer["error"]["type"] == "rate_limit_error"
        assert answer["request_id"] == refused.headers["request-id"]

        refused = await client.post(
            "/v1/responses", json={"model": MODEL, "input": "hi"}, headers=mine
        )
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"

        other = {"authorization": f"Bearer {OTHER}"}
        assert (
            await client.post("/v1/chat/completions", json=chat_body(), headers=other)
        ).status_code == 200
        # A wrong key is a 401, never a rate-limit refusal, and counts against nobody.
        wrong = {"authorization": "Bearer nope"}
        assert (
            await client.post("/v1/chat/completions", json=chat_body(), headers=wrong)
        ).status_code == 401
        metrics = await client.get("/metrics")
        assert 'flashbox_admission_rejected_total{reason="rate_limited"} 3.0' in metrics.text
        assert 'flashbox_rate_limited_total{limit="requests",source="local"} 3.0' in metrics.text


async def test_tokens_of_finished_requests_are_charged(engine: FakeEngine) -> None:
    # The fake engine's answer: 12 prompt + 5 completion tokens.
    async with gateway_client(engine, rate_limits={"tokens_per_minute": 30}) as client:
        first = await client.post("/v1/chat/completions", json=chat_body())
        assert first.status_code == 200
        assert first.headers["x-ratelimit-remaining-tokens"] == "30"  # charged after the fact
        streamed = await client.post("/v1/chat/completions", json=chat_body(stream=True))
        assert streamed.status_code == 200
        assert streamed.headers["x-ratelimit-remaining-tokens"] in ("13", "12")
        # 34 tokens of 30: refused until the debt has drained.
        refused = await client.post("/v1/chat/completions", json=chat_body())
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["type"] == "tokens"
        assert "Limit 30, Used 34" in error["message"]
        assert int(refused.headers["retry-after"]) in (8, 9)


async def test_without_api_keys_the_limits_are_per_client_address(engine: FakeEngine) -> None:
    async with gateway_client(engine, rate_limits={"requests_per_minute": 1}) as client:
        assert (await client.post("/v1/chat/completions", json=chat_body())).status_code == 200
        refused = await client.post(
            "/v1/chat/completions",
            json=chat_body(),
            headers={"authorization": "Bearer another-made-up-key"},
        )
        assert refused.status_code == 429
        assert "client address" in refused.json()["error"]["message"]
