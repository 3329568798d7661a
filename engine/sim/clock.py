"""The model clock: the reference host's timeline, kept next to the wall clock.

It advances by each step's modelled seconds while the step sleeps, stands still between steps
(the simulator's own processing is not modelled work), runs free while the engine is idle, and
stops at a request's arrival at an idle engine until the step starts, so event-loop wake-up
latency is not counted as modelled queue time. Wall targets are absolute, so a late timer is
made up in the next steps — up to CATCH_UP_WINDOW_S; older lag is kept, and shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable

CATCH_UP_WINDOW_S = 0.002


class ModelClock:
    def __init__(self, time_scale: float, wall: Callable[[], float]) -> None:
        self.time_scale = time_scale
        self._wall = wall
        self.model = 0.0  # reference seconds at `_anchor`
        self._anchor = wall()
        self._cap = math.inf  # how far the model may run past the anchor
        self._target = self._anchor  # wall time the current step should end at
        self.idle = True

    def now(self) -> float:
        elapsed = (self._wall() - self._anchor) / self.time_scale
        return self.model + min(self._cap, max(0.0, elapsed))

    def arrival(self) -> float:
        """Model time of a request arriving now."""
        model_time = self.now()
        if self.idle:
            self.idle = False
            self.model, self._anchor, self._cap = model_time, self._wall(), 0.0
            self._target = self._anchor
        return model_time

    def go_idle(self) -> None:
        self.model, self._anchor, self._cap = self.now(), self._wall(), math.inf
        self.idle = True

    def begin_step(self, seconds: float) -> float:
        """Start a step of `seconds` modelled time; returns the wall delay to sleep."""
        now = self._wall()
        start = max(self._target, now - CATCH_UP_WINDOW_S)
        self.model = self.now()
        self._anchor, self._cap = start, seconds
        self._target = start + seconds * self.time_scale
        return max(0.0, self._target - now)

    def end_step(self, seconds: float) -> None:
        self.model += seconds
        self._anchor, self._cap = self._wall(), 0.0
