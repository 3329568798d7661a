"""Admission control through a real gateway: one slot, a queue of one, then 429 / 503."""

from __future__ import annotations

import threading

import httpx

from tests.reliability.conftest import (
    assert_openai_error,
    chat_body,
    gateway_env,
    metric,
    sim_params,
)
from tests.reliability.faults import StreamResult, stream_chat, wait_for
from tests.support.procs import Proc, start_gateway


def admission_gateway(sim: Proc, queue_timeout_s: float) -> Proc:
    return start_gateway(
        [sim.url],
        env=gateway_env(
            FLASHBOX_ADMISSION__MAX_IN_FLIGHT="1",
            FLASHBOX_ADMISSION__MAX_QUEUE="1",
            FLASHBOX_ADMISSION__QUEUE_TIMEOUT_S=str(queue_timeout_s),
            FLASHBOX_ADMISSION__RETRY_AFTER_S="2",
        ),
    )


def hold_the_slot(gateway: Proc, results: list[StreamResult]) -> threading.Thread:
    """A request that keeps the only slot until its first-token deadline (3 s) ends it."""
    thread = threading.Thread(
        target=lambda: results.append(
            stream_chat(gateway, chat_body(**sim_params(fault="stall_first")))
        )
    )
    thread.start()
    assert wait_for(lambda: metric(gateway, "flashbox_requests_in_flight") == 1)
    return thread


def post(gateway: Proc, out: list[httpx.Response]) -> threading.Thread:
    thread = threading.Thread(
        target=lambda: out.append(
            httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), timeout=30)
        )
    )
    thread.start()
    return thread


def test_queue_full_is_429_and_the_queued_request_is_served(sim: Proc) -> None:
    gateway = admission_gateway(sim, queue_timeout_s=20)
    try:
        results: list[StreamResult] = []
        holder = hold_the_slot(gateway, results)
        queued: list[httpx.Response] = []
        waiter = post(gateway, queued)
        # The queue (of one) is full once the second request waits in it.
        assert wait_for(lambda: metric(gateway, "flashbox_admission_queued") == 1)
        refused = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), timeout=30)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "2"
        assert assert_openai_error(refused)["code"] == "queue_full"
        holder.join(30)
        waiter.join(30)
        assert results[0].error is not None  # the holder ended at its deadline
        assert queued[0].status_code == 200, queued[0].text
        assert metric(gateway, "flashbox_admission_rejected_total", {"reason": "queue_full"}) == 1
        # The queued request's wait is in the queue stage: it waited for the holder's 3 s
        # first-token deadline, so its queue stage is more than a second.
        count = metric(
            gateway, "flashbox_ttft_stage_seconds_bucket", {"stage": "queue", "le": "1.0"}
        )
        total = metric(gateway, "flashbox_ttft_stage_seconds_count", {"stage": "queue"})
        assert total - count >= 1
        assert wait_for(lambda: metric(gateway, "flashbox_requests_in_flight") == 0)
    finally:
        gateway.stop()


def test_queue_deadline_is_503(sim: Proc) -> None:
    gateway = admission_gateway(sim, queue_timeout_s=0.5)
    try:
        results: list[StreamResult] = []
        holder = hold_the_slot(gateway, results)
        late = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), timeout=30)
        assert late.status_code == 503
        assert late.headers["retry-after"] == "2"
        assert late.json()["error"]["code"] == "queue_timeout"
        assert (
            metric(gateway, "flashbox_admission_rejected_total", {"reason": "queue_timeout"}) == 1
        )
        holder.join(30)
        ok = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(), timeout=30)
        assert ok.status_code == 200
        assert wait_for(lambda: metric(gateway, "flashbox_requests_in_flight") == 0)
    finally:
        gateway.stop()
