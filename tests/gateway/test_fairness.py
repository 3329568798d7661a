"""gateway.fairness: each replica's running slots and the fair order of the requests waiting."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.errors import NoReplicaError, RateLimitError
from gateway.fairness import FairSlots, Slot
from gateway.observability.metrics import Metrics
from gateway.settings import FairnessSettings, KeyShare

A, B, C = "a" * 12, "b" * 12, "c" * 12


def slots(capacity: int = 2, **settings: Any) -> tuple[FairSlots, Metrics]:
    metrics = Metrics()
    fair = FairSlots(FairnessSettings(**settings), metrics, lambda _name: capacity, service_s=20)
    return fair, metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def serve_order(fair: FairSlots, running: list[Slot], waiting: list[Slot]) -> list[str]:
    """Release the running slots one at a time, then each slot as it is granted: the flows of
    the waiting slots in the order they were granted."""
    order: list[str] = []
    granted: set[int] = set()
    queue = list(running)
    while queue:
        fair.release(queue.pop(0))
        for slot in waiting:
            if slot.granted and id(slot) not in granted:
                granted.add(id(slot))
                order.append(slot.flow)
                queue.append(slot)
    return order


async def test_slots_are_granted_up_to_the_replica_capacity_then_queued() -> None:
    fair, metrics = slots(capacity=2)
    first, second, third = (fair.claim("r1", A) for _ in range(3))
    assert first.granted
    assert second.granted
    assert not third.granted
    assert fair.running("r1") == 2
    assert fair.waiting == 1
    assert sample(metrics, "flashbox_fair_queue_waiting", key=A) == 1
    # Another replica has its own slots.
    assert fair.claim("r2", A).granted
    fair.release(first)
    await fair.wait(third)
    assert third.granted
    assert fair.waiting == 0
    assert sample(metrics, "flashbox_fair_queue_waiting", key=A) == 0
    assert sample(metrics, "flashbox_fair_queue_wait_seconds_count", key=A) == 1


async def test_a_flow_that_sends_one_request_goes_ahead_of_a_flood() -> None:
    fair, _ = slots(capacity=2)
    running = [fair.claim("r1", A) for _ in range(2)]
    flood = [fair.claim("r1", A) for _ in range(10)]
    light = fair.claim("r1", B)
    order = serve_order(fair, running, [*flood, light])
    # FIFO would serve B twelfth. Here it ties with the flood's first request (both flows
    # start at virtual time 0), which came first.
    assert order.index(B) == 1
    assert order.count(A) == 10


async def test_once_a_flood_is_being_served_a_new_request_takes_the_next_slot() -> None:
    fair, _ = slots(capacity=2)
    running = [fair.claim("r1", A) for _ in range(2)]
    flood = [fair.claim("r1", A) for _ in range(20)]
    for slot in running:
        fair.release(slot)
    fair.release(flood[0])
    assert sum(slot.granted for slot in flood) == 3
    light = fair.claim("r1", B)
    fair.release(flood[1])
    assert light.granted
    assert sum(slot.granted for slot in flood) == 3


async def test_two_floods_share_slots_by_weight() -> None:
    fair, _ = slots(capacity=1, keys={A: KeyShare(weight=2)})
    running = [fair.claim("r1", C)]
    waiting = [fair.claim("r1", flow) for flow in [B] * 30 + [A] * 30]
    order = serve_order(fair, running, waiting)[:30]
    # A arrived after all of B's and still gets two slots for each of B's.
    assert order.count(A) == 20
    assert order.count(B) == 10


async def test_higher_priority_goes_first_and_pinned_turns_can_be_raised() -> None:
    fair, _ = slots(
        capacity=1, pinned_priority=1, keys={A: KeyShare(priority=-1), B: KeyShare(priority=0)}
    )
    running = [fair.claim("r1", C)]
    batch = [fair.claim("r1", A) for _ in range(3)]
    new_conversation = fair.claim("r1", B)
    pinned_turn = fair.claim("r1", B, pinned=True)
    order = serve_order(fair, running, [*batch, new_conversation, pinned_turn])
    assert order == [B, B, A, A, A]
    assert pinned_turn.priority == 1
    assert new_conversation.priority == 0


async def test_a_key_over_its_share_of_the_queue_gets_a_429_with_retry_after() -> None:
    fair, metrics = slots(capacity=1, max_queued_per_key=2, keys={B: KeyShare(max_queued=5)})
    fair.claim("r1", A)
    for _ in range(2):
        fair.check_room(A)
        fair.claim("r1", A)
    with pytest.raises(RateLimitError) as refused:
        fair.check_room(A)
    error = refused.value
    assert error.status_code == 429
    assert error.code == "key_queue_full"
    assert "2 requests waiting" in error.message
    # Two ahead, one slot, 20 s each.
    assert error.headers["retry-after"] == "40"
    assert sample(metrics, "flashbox_fair_queue_rejected_total", key=A, reason="key_queue_full")
    # Another key still has room; B's own bound is larger.
    for _ in range(5):
        fair.check_room(B)
        fair.claim("r1", B)
    with pytest.raises(RateLimitError):
        fair.check_room(B)


async def test_the_gateway_queue_bound_refuses_every_key() -> None:
    fair, _ = slots(capacity=1, max_queued=3)
    fair.claim("r1", A)
    for flow in (A, B, C):
        fair.check_room(flow)
        fair.claim("r1", flow)
    with pytest.raises(RateLimitError) as refused:
        fair.check_room("addr:10.0.0.9")
    assert refused.value.code == "queue_full"


async def test_a_request_that_waits_too_long_gets_a_503_and_its_place_goes() -> None:
    fair, metrics = slots(capacity=1, max_wait_s=0.05)
    running = fair.claim("r1", A)
    late = fair.claim("r1", B)
    after = fair.claim("r1", C)
    with pytest.raises(NoReplicaError) as refused:
        await fair.wait(late)
    assert refused.value.code == "queue_timeout"
    assert refused.value.headers["retry-after"]
    assert sample(metrics, "flashbox_fair_queue_rejected_total", key=B, reason="timeout") == 1
    fair.release(running)
    # The slot went past the request that gave up.
    assert after.granted
    assert not late.granted
    assert fair.running("r1") == 1


async def test_a_client_that_leaves_while_waiting_gives_its_place_up() -> None:
    fair, _ = slots(capacity=1)
    running = fair.claim("r1", A)
    leaving = fair.claim("r1", B)
    staying = fair.claim("r1", C)
    task = asyncio.create_task(fair.wait(leaving))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fair.waiting == 1
    fair.release(running)
    await fair.wait(staying)
    assert staying.granted
    assert fair.running("r1") == 1
    # Releasing twice changes nothing.
    fair.release(running)
    assert fair.running("r1") == 1


async def test_a_slot_granted_as_its_wait_times_out_is_passed_on() -> None:
    fair, _ = slots(capacity=1, max_wait_s=0.05)
    running = fair.claim("r1", A)
    racing = fair.claim("r1", B)
    next_one = fair.claim("r1", C)
    task = asyncio.create_task(fair.wait(racing))
    await asyncio.sleep(0.04)
    fair.release(running)  # granted just before the deadline...
    await task  # ...and taken
    assert racing.granted
    assert not next_one.granted
    fair.release(racing)
    assert next_one.granted


async def test_draining_refuses_what_waits_and_what_would() -> None:
    fair, _ = slots(capacity=1)
    fair.claim("r1", A)
    waiting = fair.claim("r1", B)
    task = asyncio.create_task(fair.wait(waiting))
    await asyncio.sleep(0)
    fair.refuse_waiting(lambda: NoReplicaError("shutting down", code="shutting_down"))
    with pytest.raises(NoReplicaError):
        await task
    assert fair.waiting == 0
    with pytest.raises(NoReplicaError):
        fair.claim("r1", C)


async def test_more_slots_reported_lets_waiting_requests_go() -> None:
    capacity = {"r1": 1}
    fair = FairSlots(FairnessSettings(), Metrics(), lambda name: capacity[name], service_s=20)
    fair.claim("r1", A)
    waiting = [fair.claim("r1", B) for _ in range(2)]
    capacity["r1"] = 3
    fair.capacity_changed("r1")
    assert all(slot.granted for slot in waiting)


async def test_disabled_grants_everything() -> None:
    fair, _ = slots(capacity=1, enabled=False, max_queued_per_key=1)
    claimed = [fair.claim("r1", A) for _ in range(5)]
    fair.check_room(A)
    assert all(slot.granted for slot in claimed)
    assert fair.running("r1") == 0
    assert fair.waiting == 0


async def test_client_addresses_share_one_metric_label() -> None:
    fair, metrics = slots(capacity=1)
    fair.claim("r1", "addr:10.0.0.1")
    fair.claim("r1", "addr:10.0.0.2")
    fair.claim("r1", "addr:10.0.0.3")
    assert sample(metrics, "flashbox_fair_queue_waiting", key="anonymous") == 2


async def test_many_given_up_places_do_not_grow_the_heap_past_the_queue() -> None:
    fair, _ = slots(capacity=1)
    fair.claim("r1", A)
    keep = fair.claim("r1", B)
    for _ in range(500):
        fair.release(fair.claim("r1", C))
    state = fair._replicas["r1"]
    assert len(state.heap) <= 2 * state.waiting + 64
    assert fair.waiting == 1
    assert not keep.granted


def test_fairness_keys_are_key_ids() -> None:
    with pytest.raises(ValueError, match="key ids"):
        FairnessSettings(keys={"sk-secret-key": KeyShare()})
    assert FairnessSettings(keys={"addr:10.0.0.1": KeyShare(priority=2)}).keys


async def test_serving_a_higher_band_does_not_move_a_lower_bands_clock() -> None:
    """Pinned turns (a band above) served in between must not push a new flow of the default
    band behind the flood that band already has waiting."""
    fair, _ = slots(capacity=1, pinned_priority=1)
    holder = fair.claim("r1", C)
    flood = [fair.claim("r1", A) for _ in range(10)]
    pinned = [fair.claim("r1", C, pinned=True) for _ in range(5)]
    for slot in [holder, *pinned]:
        fair.release(slot)  # each hands the slot to the next pinned turn, the last to A
    assert all(slot.granted for slot in pinned)
    assert flood[0].granted
    light = fair.claim("r1", B)
    fair.release(flood[0])
    assert light.granted
    assert not flood[1].granted


async def test_a_flow_over_its_share_is_refused_even_when_its_requests_were_routed_at_once() -> (
    None
):
    """Requests of one flow that all passed the check before routing are counted again when
    they would queue."""
    fair, _ = slots(capacity=1, max_queued_per_key=2)
    fair.claim("r1", A)
    for _ in range(3):
        fair.check_room(A)  # all pass: nothing waits yet
    fair.claim("r1", A)
    fair.claim("r1", A)
    with pytest.raises(RateLimitError):
        fair.claim("r1", A)
    assert fair.waiting == 2


async def test_a_slot_granted_in_the_deadlines_tick_is_kept() -> None:
    fair, _ = slots(capacity=1, max_wait_s=0.05)
    running = fair.claim("r1", A)
    late = fair.claim("r1", B)
    loop = asyncio.get_running_loop()
    # Granted in the same tick the deadline fires.
    loop.call_later(0.05, fair.release, running)
    await fair.wait(late)
    assert late.granted
    assert fair.running("r1") == 1


def test_queue_bounds_are_at_least_one() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        FairnessSettings(max_queued_per_key=0)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        KeyShare(max_queued=0)
