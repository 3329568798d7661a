"""The model clock, driven by a fake wall clock (deterministic)."""

from __future__ import annotations

import pytest

from engine.sim.clock import CATCH_UP_WINDOW_S, ModelClock


class FakeWall:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_idle_runs_free_and_arrival_freezes_until_the_step() -> None:
    wall = FakeWall()
    clock = ModelClock(0.001, wall)
    wall.t += 0.5  # idle: 500 s of model time pass
    assert clock.now() == pytest.approx(500.0)
    arrival = clock.arrival()
    wall.t += 0.001  # the loop wakes late: not modelled time
    assert clock.now() == pytest.approx(arrival)
    delay = clock.begin_step(6.5)
    # The step started at the arrival: the late wake-up is taken out of the sleep.
    assert delay == pytest.approx(0.0065 - 0.001)
    wall.t += delay
    clock.end_step(6.5)
    assert clock.model == pytest.approx(arrival + 6.5)


def test_small_lateness_is_caught_up_large_lag_is_kept() -> None:
    wall = FakeWall()
    clock = ModelClock(0.01, wall)
    clock.arrival()
    delay = clock.begin_step(1.0)  # 10 ms
    wall.t += delay + 0.001  # timer 1 ms late
    clock.end_step(1.0)
    assert clock.begin_step(1.0) == pytest.approx(0.010 - 0.001)
    wall.t += 0.010 + 0.050  # 50 ms of lag: beyond the window
    clock.end_step(1.0)
    assert clock.begin_step(1.0) == pytest.approx(0.010 - CATCH_UP_WINDOW_S)
    assert clock.model == pytest.approx(2.0)
