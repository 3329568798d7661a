"""The flashbox placement policy: pins, rendezvous, checkpoint budgets, spill, verification."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from gateway.errors import NoReplicaError
from gateway.routing import AffinityPicker, Outcome, Replica, RequestContext
from gateway.routing.pins import PinTable
from gateway.routing.rendezvous import ranked
from gateway.settings import RoutingSettings
from tests.support.clock import Clock


def make(
    n: int = 3, **settings: object
) -> tuple[AffinityPicker, list[Replica], Counter[str], Clock]:
    replicas = [Replica.from_url(f"http://r{i}:1") for i in range(n)]
    for replica in replicas:
        replica.healthy = True
    counts: Counter[str] = Counter()
    clock = Clock()
    picker = AffinityPicker(
        replicas,
        RoutingSettings.model_validate(settings),
        lambda outcome, kind: counts.update([outcome]),
        clock,
    )
    return picker, replicas, counts, clock


def ctx(key: str | None, rid: str = "rid", prompt: str = "p") -> RequestContext:
    return RequestContext(rid, key, prompt)


def turn(picker: AffinityPicker, key: str, prompt_tokens: int, cached: int) -> Replica:
    c = ctx(key, rid=f"{key}-{prompt_tokens}")
    replica = picker.pick(c).replica
    picker.report(c, replica, Outcome.OK, prompt_tokens=prompt_tokens, cached_tokens=cached)
    return replica


def test_sessions_stay_and_turns_are_verified() -> None:
    picker, _, counts, _ = make()
    first = turn(picker, "s1", 1000, 0)
    assert counts == {"new": 1}
    # Turn 2 promised the previous prompt rounded down to the track interval: 768 tokens.
    assert turn(picker, "s1", 1500, 768) is first
    assert turn(picker, "s1", 2000, 1000) is first
    assert counts == {"new": 1, "hit": 1, "verified_miss": 1}


def test_new_sessions_follow_rendezvous_and_respect_budgets() -> None:
    # A slack this large never binds: rendezvous alone, within the checkpoint budgets.
    picker, replicas, counts, _ = make(
        balance_slack=100.0, checkpoint_slots=9, max_running_requests=2, checkpoints_per_session=2.0
    )
    # Budget (9 - 2 - 1) / 2 + 1 = 4 sessions per replica: 12 fit, none over budget.
    for i in range(12):
        key = f"s{i}"
        replica = picker.pick(ctx(key, rid=key)).replica
        if i < 4:  # every replica has room yet: the first rendezvous choice
            assert replica is ranked(key, replicas)[0]
    assert [picker.live_sessions(r) for r in replicas] == [4, 4, 4]
    assert counts == {"new": 12}
    # Beyond every budget: the least full replica.
    picker.pick(ctx("extra", rid="extra"))
    assert sorted(picker.live_sessions(r) for r in replicas) == [4, 4, 5]


def test_new_sessions_keep_within_their_share_of_the_pool() -> None:
    # Rendezvous with bounded loads: a replica takes a new session only while its sessions
    # stay within (1 + slack) of its share of the pool's budget; the rest go to the next choice.
    picker, replicas, counts, _ = make(checkpoint_slots=100, max_running_requests=4)
    keys = [f"s{i}" for i in range(60)]
    for i, key in enumerate(keys, start=1):
        replica = picker.pick(ctx(key, rid=key)).replica
        bound = math.ceil(i / 3 * 1.1)
        assert all(picker.live_sessions(r) <= bound for r in replicas)
        if replica is not ranked(key, replicas)[0]:
            assert picker.live_sessions(ranked(key, replicas)[0]) == bound
    assert counts == {"new": 60}
    assert max(picker.live_sessions(r) for r in replicas) == 22
    # Unequal budgets (96 and 48 sessions): the bounds follow the budgets, 2/3 and 1/3.
    picker, replicas, _, _ = make(2, checkpoint_slots=100, max_running_requests=4)
    replicas[1].checkpoint_slots = 52
    for i in range(90):
        picker.pick(ctx(f"u{i}", rid=str(i)))
    big, small = (picker.live_sessions(r) for r in replicas)
    assert big + small == 90
    assert big <= 66
    assert small <= 33


def test_adding_a_replica_moves_no_pin() -> None:
    picker, _replicas, _, _ = make(2)
    before = {f"s{i}": picker.pick(ctx(f"s{i}", rid=f"a{i}")).replica.name for i in range(40)}
    extra = Replica.from_url("http://r9:1")
    extra.healthy = True
    picker.add(extra)
    after = {key: picker.pick(ctx(key, rid=f"b{key}")).replica.name for key in before}
    assert after == before
    # New sessions now reach it.
    assert any(picker.pick(ctx(f"n{i}", rid=f"n{i}")).replica is extra for i in range(40))


def test_failed_replica_sessions_move_to_their_next_choice() -> None:
    picker, replicas, counts, _ = make()
    keys = [f"s{i}" for i in range(30)]
    home = {k: picker.pick(ctx(k, rid=k)).replica for k in keys}
    dead = replicas[0]
    dead.healthy = False
    for key in keys:
        moved = picker.pick(ctx(key, rid="again-" + key)).replica
        if home[key] is dead:
            assert moved is next(r for r in ranked(key, replicas) if r is not dead)
        else:
            assert moved is home[key]
    assert counts["failover"] == sum(1 for k in keys if home[k] is dead) > 0
    # It comes back: the moved sessions stay where they are now.
    dead.healthy = True
    moved_keys = [k for k in keys if home[k] is dead]
    assert all(picker.pick(ctx(k, rid="x" + k)).replica is not dead for k in moved_keys)


def test_drained_replica_gets_no_new_work() -> None:
    picker, replicas, _, _ = make(2)
    replicas[0].draining = True
    assert {picker.pick(ctx(f"s{i}", rid=str(i))).replica.name for i in range(20)} == {"r1:1"}
    replicas[1].healthy = False
    with pytest.raises(NoReplicaError):
        picker.pick(ctx("s"))


def test_spill_only_when_waiting_costs_more_than_reprefilling() -> None:
    picker, replicas, counts, _ = make(2, max_running_requests=4, service_s=20.0)
    home = turn(picker, "s", 1000, 0)
    other = replicas[1] if home is replicas[0] else replicas[0]
    # 60k tokens (240k chars): a miss costs 60k / 1273 - 10 = ~37 s more than a hit, and a
    # spill two of them (its own, and the one its stale checkpoint causes): ~74 s.
    big = "x" * 240_000
    home.in_flight = 16  # 13 queued ahead: 13 * 20 / 4 = 65 s of wait < 74 s
    assert picker.pick(ctx("s", rid="t2", prompt=big)).replica is home
    picker.report(ctx("s", rid="t2"), home, Outcome.OK, prompt_tokens=1200, cached_tokens=768)
    home.in_flight = 20  # 17 queued: 85 s > 74 s
    # ... but the other replica's running slots are all taken: the re-prefill would queue there
    # and delay everyone behind it, so the session stays.
    other.in_flight = 4
    assert picker.pick(ctx("s", rid="t3", prompt=big)).replica is home
    picker.report(ctx("s", rid="t3"), home, Outcome.OK, prompt_tokens=1500, cached_tokens=1024)
    other.in_flight = 3  # a free running slot there: it spills
    spill = ctx("s", rid="t4", prompt=big)
    assert picker.pick(spill).replica is other
    assert counts["spill"] == 1
    picker.report(spill, other, Outcome.OK, prompt_tokens=2000, cached_tokens=0)
    # The next turn there is verified against the spilled turn's prompt.
    home.in_flight = 0
    after = ctx("s", rid="t5", prompt=big + " and the next turn")
    assert picker.pick(after).replica is other
    picker.report(after, other, Outcome.OK, prompt_tokens=2500, cached_tokens=0)
    assert counts["verified_miss"] == 1
    # A small context spills sooner: re-prefilling 4k tokens costs nothing over a hit.
    picker2, _replicas2, _, _ = make(2, max_running_requests=4)
    home2 = turn(picker2, "s", 1000, 0)
    home2.in_flight = 4
    assert picker2.pick(ctx("s", rid="t2", prompt="x" * 16_000)).replica is not home2


def test_no_spill_when_every_other_budget_is_taken() -> None:
    # Budget (3 - 1 - 1) / 1 + 1 = 2 sessions per replica, and both replicas hold two: a spill
    # would push another session's checkpoint out wherever it went, so the session waits.
    picker, replicas, counts, _ = make(2, checkpoint_slots=3, max_running_requests=1)
    homes = {key: turn(picker, key, 1000, 0) for key in ("a", "b", "c", "d")}
    assert sorted(picker.live_sessions(r) for r in replicas) == [2, 2]
    home = homes["a"]
    home.in_flight = 10
    assert picker.pick(ctx("a", rid="t2", prompt="x" * 240_000)).replica is home
    assert counts["spill"] == 0


def test_baseline_policies() -> None:
    picker, replicas, counts, _ = make(policy="round_robin")
    assert len({picker.pick(ctx("same", rid=str(i))).replica.name for i in range(3)}) == 3
    picker, replicas, counts, _ = make(policy="consistent_hash")
    assert {picker.pick(ctx("same", rid=str(i))).replica.name for i in range(5)} == {
        ranked("same", replicas)[0].name
    }
    assert counts == {"unpinned": 5}


def test_breaker_opens_after_failures_and_half_opens() -> None:
    picker, replicas, _, clock = make(1, breaker_failures=2, breaker_open_s=5.0)
    (replica,) = replicas
    for i in range(2):
        c = ctx("s", rid=f"f{i}")
        picker.pick(c)
        picker.report(c, replica, Outcome.UPSTREAM_ERROR)
    with pytest.raises(NoReplicaError):
        picker.pick(ctx("s", rid="blocked"))
    clock.now += 5.0
    trial = ctx("s", rid="trial")
    assert picker.pick(trial).replica is replica
    # One trial at a time while half-open.
    with pytest.raises(NoReplicaError):
        picker.pick(ctx("s", rid="second"))
    picker.report(trial, replica, Outcome.OK, prompt_tokens=10)
    assert picker.pick(ctx("s", rid="after")).replica is replica


@pytest.mark.parametrize("outcome", [Outcome.REJECTED, Outcome.CLIENT_GONE])
def test_a_trial_that_told_nothing_lets_the_next_request_try(outcome: Outcome) -> None:
    """A half-open breaker's trial that the engine refused as the client's mistake, or whose
    client left, says nothing of the replica: the next request is the trial. (Before, the
    replica was shut out until a probe-independent success that could never come.)"""
    picker, replicas, _, clock = make(1, breaker_failures=1, breaker_open_s=5.0)
    (replica,) = replicas
    c = ctx("s", rid="f")
    picker.pick(c)
    picker.report(c, replica, Outcome.UPSTREAM_ERROR)
    clock.now += 5.0
    trial = ctx("s", rid="trial")
    picker.pick(trial)
    picker.report(trial, replica, outcome)
    assert picker.pick(ctx("s", rid="next")).replica is replica


def test_connect_failure_marks_the_replica_down_at_once() -> None:
    picker, _replicas, counts, _ = make(2)
    c = ctx("s", rid="1")
    first = picker.pick(c).replica
    picker.report(c, first, Outcome.CONNECT_FAILED)
    assert not first.healthy
    retry = picker.pick(c, exclude=[first.name]).replica
    assert retry is not first
    assert counts == {"new": 1, "failover": 1}


def test_unkeyed_requests_are_unpinned() -> None:
    picker, _, counts, _ = make()
    picker.pick(ctx(None))
    assert counts == {"unpinned": 1}
    assert len(picker.pins) == 0


def test_pin_table_is_bounded_by_size_and_idle_time() -> None:
    table = PinTable(max_size=3, idle_ttl_s=10.0)
    for i in range(5):
        table.put(f"k{i}", "a", now=float(i))
    assert len(table) == 3
    assert table.peek("k0") is None
    assert table.peek("k4") is not None
    assert table.live("a") == 3
    assert table.get("k2", now=5.0) is not None  # touched: now the most recent
    table.sweep(now=13.5)  # k3 (last used 3.0) expired; k2 (5.0) and k4 (4.0) not
    assert table.peek("k3") is None
    assert len(table) == 2
    assert table.get("k4", now=14.5) is None
    assert table.live("a") == 1
    table.put("k2", "b", now=15.0)
    assert (table.live("a"), table.live("b")) == (0, 1)


def test_picker_pin_table_stays_within_its_bound() -> None:
    picker, _, _, _ = make(pin_table_size=50)
    for i in range(500):
        picker.pick(ctx(f"s{i}", rid=str(i)))
    assert len(picker.pins) == 50


def test_a_spill_keeps_charging_the_replica_it_left_until_its_sessions_move_on() -> None:
    # Budget (3 - 1 - 1) / 1 + 1 = 2 sessions per replica.
    picker, replicas, counts, clock = make(
        balance_slack=100.0, checkpoint_slots=3, max_running_requests=1, checkpoints_per_session=1.0
    )
    a, b, c = replicas
    # Sessions by rendezvous order: two that rank a, b first; one that ranks b first; a third
    # that ranks a first and then c.
    keys = [f"s{i}" for i in range(500)]
    ab = [k for k in keys if ranked(k, replicas)[:2] == [a, b]]
    b_first = next(k for k in keys if ranked(k, replicas)[0] is b)
    a_then_c = next(k for k in keys if ranked(k, replicas)[:2] == [a, c])
    for key in (ab[0], ab[1], b_first):
        clock.now += 1
        turn(picker, key, 1000, 0)
    assert [picker.live_sessions(r) for r in replicas] == [2, 1, 0]
    # a is queued up: ab[0]'s next turn spills to b, leaving its checkpoint in a's pool.
    clock.now += 1
    a.in_flight = 10
    assert picker.pick(ctx(ab[0], rid="spill", prompt="x" * 4000)).replica is b
    a.in_flight = 0
    assert counts["spill"] == 1
    # a's pool still holds two sessions' checkpoints (ab[1]'s, older than the stale one, and
    # ab[0]'s): a new session that ranks a first goes to c, not over a's budget.
    clock.now += 1
    assert picker.pick(ctx(a_then_c, rid="new")).replica is c
    assert picker.pins.charged(a.name) == 2
    # Once ab[1] has started a turn since the spill, the stale checkpoint is a's oldest: freed.
    clock.now += 1
    assert turn(picker, ab[1], 1500, 768) is a
    assert picker.pins.charged(a.name) == 1


def test_one_replica_takes_every_session_and_logs_placements_over_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Budget (9 - 2 - 1) / 2 + 1 = 4 sessions; the fifth and sixth land over it, on the only
    # replica there is, and are pinned there like the rest.
    picker, replicas, counts, _ = make(
        1, checkpoint_slots=9, max_running_requests=2, checkpoints_per_session=2.0
    )
    with caplog.at_level("INFO", logger="gateway.routing.affinity"):
        assert all(turn(picker, f"s{i}", 1000, 0) is replicas[0] for i in range(6))
    assert counts == {"new": 6}
    assert len([r for r in caplog.records if "over budget" in r.getMessage()]) == 2
    assert picker.pins.live(replicas[0].name) == 6
    assert turn(picker, "s0", 1500, 768) is replicas[0]
    assert counts["hit"] == 1


def test_a_conversation_the_engine_never_took_is_not_placed() -> None:
    """#33: a new conversation refused by the engine (a client's mistake) or abandoned before
    it reached the engine (its fair-queue wait ran out, its client left) holds no budget and
    leaves no pin: a client sending many of them cannot fill the replicas' budgets."""
    picker, _, counts, _ = make(n=1)
    refused, abandoned = ctx("s-refused", rid="r1"), ctx("s-abandoned", rid="r2")
    replica = picker.pick(refused).replica
    picker.pick(abandoned)
    assert picker.pins.charged(replica.name) == 2
    picker.report(refused, replica, Outcome.REJECTED)
    picker.forget(abandoned, replica)
    assert picker.pins.charged(replica.name) == 0
    assert picker.pins.peek("s-refused") is None
    assert picker.pins.peek("s-abandoned") is None
    # A pinned conversation's refused turn keeps its pin (its checkpoint is still there).
    assert turn(picker, "s-live", 1000, 0) is replica
    live = ctx("s-live", rid="r3")
    picker.report(live, picker.pick(live).replica, Outcome.REJECTED)
    assert picker.pins.peek("s-live") is not None
    assert picker.pins.charged(replica.name) == 1
    assert counts["new"] == 3


def test_a_placement_another_turn_made_real_is_kept() -> None:
    """Two requests of one new conversation: the first places it, the second is served on its
    pin; the first then gives up (its wait ran out). The checkpoint is real: the pin stays."""
    picker, _, _, _ = make(n=1)
    first, second = ctx("s-twice", rid="r1"), ctx("s-twice", rid="r2")
    replica = picker.pick(first).replica
    picker.pick(second)
    picker.report(second, replica, Outcome.OK, prompt_tokens=500)
    picker.forget(first, replica)
    assert picker.pins.peek("s-twice") is not None
