"""AdmissionController in-process: FIFO hand-over, never more than max_in_flight, drain."""

from __future__ import annotations

import asyncio

import pytest

from gateway.admission import AdmissionController, Ticket
from gateway.errors import GatewayError
from gateway.settings import AdmissionSettings, Settings, ShutdownSettings
from gateway.state import AppState, build_state
from tests.gateway.fake_engine import FakeEngine


@pytest.fixture
def app_state() -> AppState:
    return build_state(Settings(engines=["http://engine:1"]), transport=FakeEngine().transport())


def controller(max_in_flight: int, max_queue: int, timeout: float = 5.0) -> AdmissionController:
    return AdmissionController(
        AdmissionSettings(
            max_in_flight=max_in_flight, max_queue=max_queue, queue_timeout_s=timeout
        ),
        ShutdownSettings(grace_s=0.1),
    )


async def test_fifo_and_bounded(app_state: AppState) -> None:
    admission = controller(max_in_flight=2, max_queue=10)
    entries = [Ticket({}, app_state) for _ in range(8)]
    order: list[int] = []
    peak = 0

    async def one(i: int) -> None:
        nonlocal peak
        await admission.acquire(entries[i])
        order.append(i)
        peak = max(peak, len(admission.running))
        await asyncio.sleep(0.01)
        admission.release(entries[i])

    tasks = []
    for i in range(8):
        tasks.append(asyncio.create_task(one(i)))
        await asyncio.sleep(0)  # arrive in order
    await asyncio.gather(*tasks)
    assert order == list(range(8))
    assert peak == 2
    assert not admission.running
    assert admission.queued == 0
    assert admission.idle.is_set()


async def test_full_queue_and_deadline(app_state: AppState) -> None:
    admission = controller(max_in_flight=1, max_queue=1, timeout=0.05)
    holder, waiter, extra = (Ticket({}, app_state) for _ in range(3))
    await admission.acquire(holder)
    waiting = asyncio.create_task(admission.acquire(waiter))
    await asyncio.sleep(0)
    with pytest.raises(GatewayError) as full:
        await admission.acquire(extra)
    assert (full.value.status_code, full.value.code) == (429, "queue_full")
    with pytest.raises(GatewayError) as late:
        await waiting
    assert (late.value.status_code, late.value.code) == (503, "queue_timeout")
    assert late.value.headers["retry-after"] == "1"
    admission.release(holder)
    assert not admission.running


async def test_cancelled_waiter_passes_its_slot_on(app_state: AppState) -> None:
    admission = controller(max_in_flight=1, max_queue=5)
    a, b, c = (Ticket({}, app_state) for _ in range(3))
    await admission.acquire(a)
    tb = asyncio.create_task(admission.acquire(b))
    tc = asyncio.create_task(admission.acquire(c))
    await asyncio.sleep(0)
    tb.cancel()  # the client left while queued
    admission.release(a)
    await tc
    assert admission.running == {c}


async def test_drain_refuses_waiters_and_new_requests(app_state: AppState) -> None:
    admission = controller(max_in_flight=1, max_queue=5)
    a, b, c = (Ticket({}, app_state) for _ in range(3))
    await admission.acquire(a)
    tb = asyncio.create_task(admission.acquire(b))
    await asyncio.sleep(0)
    admission.begin_drain()
    with pytest.raises(GatewayError) as queued:
        await tb
    assert queued.value.code == "shutting_down"
    with pytest.raises(GatewayError) as new:
        await admission.acquire(c)
    assert new.value.status_code == 503
    admission.release(a)
    assert admission.idle.is_set()
