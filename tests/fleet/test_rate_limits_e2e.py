"""Per-key rate limits across a fleet: two gateway processes sharing one redis-server, in front of
one simulator, driven by the official openai and anthropic clients. A key limited to N requests
a minute gets N answers in total across both gateways, then 429 with Retry-After in each
face's own shape; another key is unaffected; tokens used through one gateway count on the
other; with the store killed requests are still served, each gateway enforcing the limits on
its own traffic."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import anthropic
import openai
import pytest
import redis

from gateway.ratelimit.limiter import key_id
from tests.e2e.conftest import GATEWAY_ENV, MODEL, client_for, metric_sum
from tests.support.procs import Proc
from tests.support.redis import GatewayFleet, gateway_fleet

LIMIT = 3
KEY_A, KEY_B, KEY_C = "sk-fleet-a", "sk-fleet-b", "sk-fleet-c"
# A key with a tokens-per-minute limit one request's prompt and answer use up.
KEY_D, TOKENS = "sk-fleet-d", 20
HELLO: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def fleet() -> Iterator[GatewayFleet]:
    env = {
        **GATEWAY_ENV,
        "FLASHBOX_API_KEYS": f"{KEY_A},{KEY_B},{KEY_C},{KEY_D}",
        "FLASHBOX_RATE_LIMITS__REQUESTS_PER_MINUTE": str(LIMIT),
        "FLASHBOX_RATE_LIMITS__KEYS": json.dumps(
            {key_id(KEY_D): {"requests_per_minute": 100, "tokens_per_minute": TOKENS}}
        ),
        "FLASHBOX_STATE__RETRY_S": "0.2",
    }
    with gateway_fleet(env) as fleet:
        yield fleet


def chat(gateway: Proc, key: str) -> openai.types.chat.ChatCompletion:
    with client_for(gateway, api_key=key) as client:
        return client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8)


def message(gateway: Proc, key: str) -> anthropic.types.Message:
    with anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0) as client:
        return client.messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )


def test_n_answers_across_the_fleet_then_429_in_each_face_s_shape(fleet: GatewayFleet) -> None:
    a, b = fleet.gateways
    for n in range(LIMIT):
        assert chat((a, b)[n % 2], KEY_A).choices[0].message is not None

    for gateway in (a, b):
        with pytest.raises(openai.RateLimitError) as info:
            chat(gateway, KEY_A)
        error = info.value
        assert error.status_code == 429
        assert error.code == "rate_limit_exceeded"
        assert error.type == "requests"
        assert isinstance(error.body, dict)
        assert error.body["param"] is None
        assert f"Limit {LIMIT}, Used {LIMIT}" in error.body["message"]
        assert KEY_A not in error.body["message"]
        # A bucket of 3 a minute frees one request every 20 s.
        assert int(error.response.headers["retry-after"]) in range(15, 21)
        assert error.response.headers["x-ratelimit-limit-requests"] == str(LIMIT)
        assert error.response.headers["x-ratelimit-remaining-requests"] == "0"

        with pytest.raises(anthropic.RateLimitError) as refused:
            message(gateway, KEY_A)
        assert refused.value.status_code == 429
        assert isinstance(refused.value.body, dict)
        assert refused.value.body["type"] == "error"
        assert refused.value.body["error"]["type"] == "rate_limit_error"
        headers = refused.value.response.headers
        assert int(headers["retry-after"]) in range(15, 21)
        assert headers["anthropic-ratelimit-requests-remaining"] == "0"

    # Another key has its own buckets, on both gateways and both faces.
    assert chat(a, KEY_B).choices
    assert message(b, KEY_B).content is not None
    rejected = sum(
        metric_sum(g, "flashbox_admission_rejected_total", {"reason": "rate_limited"})
        for g in fleet.gateways
    )
    assert rejected == 4
    shared = sum(
        metric_sum(g, "flashbox_rate_limited_total", {"source": "shared"}) for g in fleet.gateways
    )
    assert shared == 4


def test_tokens_used_through_one_gateway_are_refused_by_the_other(fleet: GatewayFleet) -> None:
    a, b = fleet.gateways
    answer = chat(a, KEY_D)
    assert answer.usage is not None
    assert answer.usage.total_tokens > TOKENS
    # The tokens are charged after the answer is sent: wait for the charge to land in the store.
    bucket = f"flashbox:ratelimit:{key_id(KEY_D)}:tokens"
    with redis.Redis.from_url(fleet.store.url) as store:
        deadline = time.monotonic() + 5.0
        while not store.exists(bucket):
            assert time.monotonic() < deadline, "a's charge never reached the store"
            time.sleep(0.02)
    with pytest.raises(openai.RateLimitError) as refused:
        chat(b, KEY_D)
    assert refused.value.status_code == 429
    assert refused.value.type == "tokens"
    assert int(refused.value.response.headers["retry-after"]) >= 1
    with pytest.raises(anthropic.RateLimitError):
        message(a, KEY_D)


def test_with_the_store_killed_requests_are_served_under_local_limits(fleet: GatewayFleet) -> None:
    fleet.store.kill()
    a, b = fleet.gateways
    # A fresh key: each gateway now lets LIMIT of its requests through, then refuses.
    for gateway in (a, b):
        for _ in range(LIMIT):
            assert chat(gateway, KEY_C).choices
        with pytest.raises(openai.RateLimitError) as info:
            chat(gateway, KEY_C)
        assert info.value.code == "rate_limit_exceeded"
        assert metric_sum(gateway, "flashbox_state_up") == 0
        assert metric_sum(gateway, "flashbox_rate_limited_total", {"source": "local"}) == 1
    # And a key with room left is served: no request waits on the dead store.
    assert message(a, KEY_B).content is not None
