"""#38: what routing holds for a request (its pick, the half-open breaker's trial) is given
back when the request is reported or forgotten, and `pending()` shows what is still held. A
trial is a lease: one never reported expires at routing.breaker_trial_s (before, a trial whose
request never reported shut the replica out for as long as the gateway ran)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway.errors import NoReplicaError
from gateway.routing import AffinityPicker, Outcome, Outstanding, Replica, RequestContext
from gateway.routing.breaker import BreakerState, CircuitBreaker
from gateway.settings import RoutingSettings
from tests.support.clock import Clock


def make(n: int = 1, **settings: object) -> tuple[AffinityPicker, list[Replica], Clock]:
    replicas = [Replica.from_url(f"http://r{i}:1") for i in range(n)]
    for replica in replicas:
        replica.healthy = True
    clock = Clock()
    picker = AffinityPicker(
        replicas, RoutingSettings.model_validate(settings), lambda outcome, kind: None, clock
    )
    return picker, replicas, clock


def ctx(rid: str, key: str | None = "s") -> RequestContext:
    return RequestContext(rid, key, "p")


def half_open(picker: AffinityPicker, replica: Replica, clock: Clock) -> None:
    failed = ctx("failed")
    picker.pick(failed)
    picker.report(failed, replica, Outcome.UPSTREAM_ERROR)
    clock.now += replica.breaker.open_s
    assert replica.breaker.state(clock()) is BreakerState.HALF_OPEN


def test_a_trial_never_reported_expires_at_its_deadline() -> None:
    picker, (replica,), clock = make(breaker_failures=1, breaker_open_s=5.0, breaker_trial_s=30.0)
    half_open(picker, replica, clock)
    lost = ctx("lost")
    assert picker.pick(lost).replica is replica  # the trial; its request never reports
    assert picker.pending() == Outstanding(picks=1, trials=1)
    clock.now += 29.0
    with pytest.raises(NoReplicaError):
        picker.pick(ctx("during"))
    clock.now += 1.0
    # The lease ran out: the next request is the trial (before: NoReplicaError for good).
    assert picker.pending().trials == 0
    following = ctx("following")
    assert picker.pick(following).replica is replica
    # The lost request's late word ("client gone") ends nothing of the lease it lost.
    picker.report(lost, replica, Outcome.CLIENT_GONE)
    assert picker.pending() == Outstanding(picks=1, trials=1)
    with pytest.raises(NoReplicaError):
        picker.pick(ctx("third"))
    picker.report(following, replica, Outcome.OK, prompt_tokens=10)
    assert replica.breaker.state(clock()) is BreakerState.CLOSED
    assert picker.pending() == Outstanding()


def test_the_expired_trial_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    picker, (replica,), clock = make(breaker_failures=1, breaker_open_s=5.0, breaker_trial_s=30.0)
    half_open(picker, replica, clock)
    picker.pick(ctx("lost"))
    clock.now += 30.0
    with caplog.at_level("WARNING", logger="gateway.routing.affinity"):
        picker.pick(ctx("following"))
    assert any("trial lost never reported" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "end",
    [
        lambda p, c, r: p.forget(c, r),
        lambda p, c, r: p.report(c, r, Outcome.CLIENT_GONE),
        lambda p, c, r: p.report(c, r, Outcome.REJECTED),
        lambda p, c, r: p.report(c, r, Outcome.OK, prompt_tokens=10),
        lambda p, c, r: p.report(c, r, Outcome.UPSTREAM_ERROR),
        lambda p, c, r: p.report(c, r, Outcome.CONNECT_FAILED),
    ],
    ids=["forget", "client_gone", "rejected", "ok", "upstream_error", "connect_failed"],
)
def test_every_end_of_a_trial_gives_it_back(
    end: Callable[[AffinityPicker, RequestContext, Replica], None],
) -> None:
    picker, (replica,), clock = make(breaker_failures=1, breaker_open_s=5.0)
    half_open(picker, replica, clock)
    trial = ctx("trial")
    picker.pick(trial)
    assert picker.pending() == Outstanding(picks=1, trials=1)
    end(picker, trial, replica)
    assert picker.pending() == Outstanding()


@pytest.mark.parametrize("policy", ["flashbox", "consistent_hash", "round_robin"])
def test_pending_counts_every_pick_until_it_is_reported_or_forgotten(policy: str) -> None:
    picker, _, _ = make(3, policy=policy)
    picks = {
        rid: picker.pick(ctx(rid, key)) for rid, key in [("a", "s1"), ("b", None), ("c", "s2")]
    }
    assert picker.pending() == Outstanding(picks=3)
    picker.report(ctx("a", "s1"), picks["a"].replica, Outcome.OK, prompt_tokens=10)
    picker.forget(ctx("b", None), picks["b"].replica)
    assert picker.pending() == Outstanding(picks=1)
    # A retry of the same request on another replica: the first pick was reported first.
    retry = ctx("c", "s2")
    picker.report(retry, picks["c"].replica, Outcome.UPSTREAM_ERROR)
    again = picker.pick(retry, exclude=[picks["c"].replica.name])
    assert picker.pending() == Outstanding(picks=1)
    picker.report(retry, again.replica, Outcome.OK, prompt_tokens=10)
    assert picker.pending() == Outstanding()


def test_a_lease_is_ended_only_by_its_holder_or_an_outcome() -> None:
    breaker = CircuitBreaker(threshold=1, open_s=5.0, trial_s=30.0)
    breaker.failure(now=0.0)
    assert breaker.on_pick(5.0, "first") is None
    assert not breaker.allows(5.0)
    breaker.trial_over("someone-else")  # a request picked before the breaker opened
    assert not breaker.allows(5.0)
    breaker.trial_over("first")
    assert breaker.allows(5.0)
    breaker.on_pick(6.0, "second")
    breaker.failure(7.0)  # reopened: the trial is over, the wait starts again
    assert breaker.trial is None
    assert not breaker.allows(8.0)
