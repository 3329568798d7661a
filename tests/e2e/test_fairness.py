"""Fair shares of the engine through real processes (#33): one key floods a simulator that runs
two requests at a time; another key's request is served with the next slot that frees, the
flood's excess is refused in each face's own 429 with Retry-After, and a stream that waits for
its turn gets its headers and the face's keepalives meanwhile.

The assertions are on order and counts, not times (shared machines are noisy); the timings
are `python -m bench fairness`'s.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.e2e.conftest import GATEWAY_ENV, MODEL, sim_and_gateway
from tests.support.metrics import metric_samples
from tests.support.procs import Proc

FLOOD, LIGHT, OTHER = "sk-flood-key", "sk-light-key", "sk-other-key"
RUNNING = 2
QUEUED_PER_KEY = 6


def key_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@pytest.fixture(scope="module")
def fair_gateway() -> Iterator[Proc]:
    env = {
        "FLASHBOX_API_KEYS": ",".join([FLOOD, LIGHT, OTHER]),
        "FLASHBOX_FAIRNESS__MAX_QUEUED_PER_KEY": str(QUEUED_PER_KEY),
        "FLASHBOX_ANTHROPIC__KEEPALIVE_S": "0.05",
    }
    # Each request holds its slot for a prefill and 72 output tokens: ~1.8 s at this scale (a
    # test's eight flood requests through two slots take ~7.5 s), so a slot frees every ~0.9 s.
    # The assertions need the flood queued, and the light request placed, between two frees;
    # at x0.05 (a free every ~0.45 s) a loaded box can miss that.
    yield from (
        gateway
        for _sim, gateway in sim_and_gateway(
            "--max-running-requests", str(RUNNING), time_scale=0.1, env={**GATEWAY_ENV, **env}
        )
    )


def _user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


class Stream(threading.Thread):
    """One streamed chat completion; notes when its first content arrived."""

    def __init__(self, url: str, key: str, text: str) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.text = url, key, text
        self.status = 0
        self.first_token: float | None = None

    def run(self) -> None:
        body = {"model": MODEL, "messages": _user(self.text), "stream": True}
        headers = {"authorization": f"Bearer {self.key}"}
        with httpx.stream(
            "POST", self.url + "/v1/chat/completions", json=body, headers=headers, timeout=120
        ) as response:
            self.status = response.status_code
            for line in response.iter_lines():
                if self.first_token is None and '"delta"' in line and "content" in line:
                    self.first_token = time.monotonic()


def _waiting(gateway: Proc, key: str) -> float:
    return sum(
        value
        for labels, value in metric_samples(gateway.url, "flashbox_fair_queue_waiting")
        if labels["key"] == key_id(key)
    )


def _flood(gateway: Proc, count: int) -> list[Stream]:
    """`count` streams from the flooding key, started in order; returns once the ones beyond
    the engine's running slots wait in the gateway."""
    streams = [Stream(gateway.url, FLOOD, f"flood {i}") for i in range(count)]
    for stream in streams:
        stream.start()
        time.sleep(0.01)  # in order: FIFO would serve them so
    deadline = time.monotonic() + 30
    while _waiting(gateway, FLOOD) < count - RUNNING:
        assert time.monotonic() < deadline, "the flood never queued in the gateway"
        time.sleep(0.02)
    return streams


def _finish(streams: list[Stream]) -> None:
    for stream in streams:
        stream.join(timeout=120)
        assert stream.status == 200
        assert stream.first_token is not None


def test_a_light_key_is_served_ahead_of_a_flood_it_arrived_behind(fair_gateway: Proc) -> None:
    flood = _flood(fair_gateway, RUNNING + QUEUED_PER_KEY)
    light = Stream(fair_gateway.url, LIGHT, "one question")
    light.start()
    light.join(timeout=120)
    _finish(flood)
    assert light.status == 200
    assert light.first_token is not None
    after = sum(1 for s in flood if s.first_token and s.first_token > light.first_token)
    # FIFO would serve it after all six waiting; fair queueing with the first or second slot
    # that frees (it ties with the flood's next request when the flood has just started).
    assert after >= QUEUED_PER_KEY - 1, after
    waits = metric_samples(fair_gateway.url, "flashbox_fair_queue_wait_seconds_count")
    counts = {labels["key"]: value for labels, value in waits}
    assert counts[key_id(FLOOD)] >= QUEUED_PER_KEY
    assert _waiting(fair_gateway, FLOOD) == 0


def test_a_key_over_its_share_gets_429_with_retry_after_on_every_face(
    fair_gateway: Proc,
) -> None:
    flood = _flood(fair_gateway, RUNNING + QUEUED_PER_KEY)
    try:
        chat = openai.OpenAI(base_url=fair_gateway.url + "/v1", api_key=FLOOD, max_retries=0)
        with pytest.raises(openai.RateLimitError) as chat_refusal:
            chat.chat.completions.create(model=MODEL, messages=_user("one more"), stream=True)
        with pytest.raises(openai.RateLimitError) as responses_refusal:
            chat.responses.create(model=MODEL, input="one more")
        claude = anthropic.Anthropic(base_url=fair_gateway.url, api_key=FLOOD, max_retries=0)
        with pytest.raises(anthropic.RateLimitError) as messages_refusal:
            claude.messages.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "one more"}]
            )
    finally:
        _finish(flood)
    for refusal in (chat_refusal.value, responses_refusal.value):
        body: Any = refusal.body
        assert body["code"] == "key_queue_full"
        assert "share of the queue" in body["message"]
        assert int(refusal.response.headers["retry-after"]) >= 1
    anthropic_body: Any = messages_refusal.value.body
    assert anthropic_body["type"] == "error"
    assert anthropic_body["error"]["type"] == "rate_limit_error"
    assert int(messages_refusal.value.response.headers["retry-after"]) >= 1
    rejected = metric_samples(fair_gateway.url, "flashbox_fair_queue_rejected_total")
    assert any(
        labels == {"key": key_id(FLOOD), "reason": "key_queue_full"} and value >= 3
        for labels, value in rejected
    )
    # The flood's refusals counted against nobody else: another key is served.
    other = openai.OpenAI(base_url=fair_gateway.url + "/v1", api_key=OTHER, max_retries=0)
    answer = other.chat.completions.create(model=MODEL, messages=_user("still there?"))
    assert answer.choices[0].finish_reason in {"stop", "length", "tool_calls"}


def test_a_stream_waiting_for_its_turn_gets_headers_and_keepalives(fair_gateway: Proc) -> None:
    flood = _flood(fair_gateway, RUNNING + QUEUED_PER_KEY)
    events: list[str] = []
    body = {"model": MODEL, "max_tokens": 64, "stream": True, "messages": _user("waiting")}
    headers = {"x-api-key": OTHER, "anthropic-version": "2023-06-01"}
    try:
        # Read raw: the anthropic SDK's stream helper does not surface ping events.
        with httpx.stream(
            "POST", fair_gateway.url + "/v1/messages", json=body, headers=headers, timeout=120
        ) as response:
            assert response.status_code == 200
            events = [
                line.removeprefix("event: ")
                for line in response.iter_lines()
                if line.startswith("event: ")
            ]
    finally:
        _finish(flood)
    first_content = events.index("content_block_start")
    assert events[0] == "message_start"
    # It waited for a slot behind the flood with its stream open, pinged meanwhile (the
    # interval is 0.05 s here; a slot frees every ~0.9 s).
    assert "ping" in events[:first_content], events[:first_content]
    assert events[-1] == "message_stop"
    stages = metric_samples(fair_gateway.url, "flashbox_ttft_stage_seconds_count")
    assert any(labels == {"stage": "slot"} and value > 0 for labels, value in stages)
