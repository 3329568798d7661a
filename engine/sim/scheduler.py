"""The simulated engine loop: a FIFO queue, a bounded running batch, one timer per step.

Each step is either a prefill (queued prompts admitted while running slots are free) or one
decode step for every running request; its modelled duration comes from the PerfModel and the
loop sleeps that long times --time-scale. Tokens of a step are handed to the waiting streams
at its end. A model clock keeps the modelled timeline (what the reference host would take)
next to the wall clock, so lag is measurable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from engine.sim.checkpoints import CheckpointPool
from engine.sim.clock import ModelClock
from engine.sim.faults import FaultKind
from engine.sim.finish import check_finish
from engine.sim.metrics import SimMetrics
from engine.sim.perf import PerfModel
from engine.sim.requests import SimRequestError
from engine.sim.state import Phase, SimRequest
from engine.sim.tokens import piece_id

# SGLang falls back to first come first served above this many waiting requests (the prefix
# matching gets expensive): srt/managers/schedule_policy.py, _determine_active_policy.
LPM_MAX_QUEUE = 128
# Requests whose first-token timing /sim/timings keeps (the newest; a benchmark reads them
# after each batch, so this only has to outlast one).
TIMINGS_KEPT = 10_000


class QueueFullError(RuntimeError):
    """More live requests than the configured queue and running bounds allow."""


class Scheduler:
    def __init__(
        self,
        *,
        perf: PerfModel,
        pool: CheckpointPool,
        metrics: SimMetrics,
        time_scale: float,
        max_running: int,
        max_queued: int,
        prefill_batch_tokens: int,
        eos_token_id: int,
        max_total_tokens: int,
        filler: Callable[[SimRequest], list[str]],
        schedule_policy: str = "fcfs",
    ) -> None:
        self.perf = perf
        self.pool = pool
        self.metrics = metrics
        self.time_scale = time_scale
        self.max_running = max_running
        self.max_queued = max_queued
        self.prefill_batch_tokens = prefill_batch_tokens
        self.schedule_policy = schedule_policy
        self.eos_token_id = eos_token_id
        self.max_total_tokens = max_total_tokens
        self._filler = filler
        self._queue: deque[SimRequest] = deque()
        self._queued = 0
        self._running: dict[str, SimRequest] = {}
        self._live: dict[str, SimRequest] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        # (rid, its x-request-id header or None, arrival, first token, modelled TTFT): arrival
        # and first token in time.perf_counter() seconds (the loop's clock ticks in whole
        # milliseconds under uvloop, too coarse for a router's added latency), the modelled TTFT
        # in reference-hardware seconds.
        self.timings: deque[tuple[str, str | None, float, float, float]] = deque(
            maxlen=TIMINGS_KEPT
        )
        self.clock = ModelClock(time_scale, self._loop.time)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sim-scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for rid in list(self._live):
            self.abort(rid, "server shutting down", counted=False)

    # -- clock -----------------------------------------------------------------------
    def model_now(self) -> float:
        return self.clock.now()

    @property
    def running_count(self) -> int:
        return len(self._running)

    @property
    def queued_count(self) -> int:
        return self._queued

    def get(self, rid: str) -> SimRequest | None:
        return self._live.get(rid)

    # -- requests --------------------------------------------------------------------
    def submit(self, req: SimRequest) -> None:
        if req.rid in self._live:
            raise SimRequestError(f"rid {req.rid!r} is already in use", "rid")
        if len(self._live) >= self.max_queued + self.max_running:
            raise QueueFullError("the simulator's request queue is full")
        req.wall_arrival = self._loop.time()
        req.perf_arrival = time.perf_counter()
        req.model.arrival = self.clock.arrival()
        self._live[req.rid] = req
        if req.fault is not None and req.fault.kind is FaultKind.STALL_FIRST:
            req.phase = Phase.PARKED
            return
        self._queue.append(req)
        self._queued += 1
        self.metrics.queued.set(self._queued)
        self._wake.set()

    def abort(self, rid: str, message: str, *, counted: bool = True) -> int:
        """Abort `rid` and, as SGLang's scheduler does, every live request whose rid starts
        with it; nothing unless `rid` itself is live (SGLang's tokenizer manager checks that
        first). Returns how many were aborted."""
        if rid not in self._live:
            return 0
        matched = [req for key, req in self._live.items() if key.startswith(rid)]
        for req in matched:
            self._finish(req, {"type": "abort", "message": message}, on_token=False)
            if counted:
                self.metrics.aborted.inc()
        return len(matched)

    def abort_all(self, message: str) -> int:
        rids = list(self._live)
        for rid in rids:
            self.abort(rid, message)
        return len(rids)

    def _finish(
        self,
        req: SimRequest,
        reason: dict[str, Any],
        *,
        on_token: bool,
        model_t: float | None = None,
    ) -> None:
        if req.done:
            return
        if req.phase is Phase.QUEUED:
            self._queued -= 1
            self.metrics.queued.set(self._queued)
        req.phase = Phase.FINISHED
        req.finish_reason = reason
        req.finish_on_token = on_token
        req.wall_finish = self._loop.time()
        req.model.finish = self.model_now() if model_t is None else model_t
        self._live.pop(req.rid, None)
        self._running.pop(req.rid, None)
        if reason["type"] != "abort":
            self.metrics.requests.inc()
            self.metrics.e2e.observe(req.wall_finish - req.wall_arrival)
            # The whole sequence supersedes the prompt's checkpoint and the one this turn
            # restored from: demote those first, so the new checkpoint takes their slots rather
            # than another session's.
            for superseded in (req.restored_checkpoint, req.prompt_checkpoint):
                if superseded is not None:
                    self.pool.demote(superseded)
            # What the engine's state covers: the prompt and all but the last output token.
            state_tokens = req.prompt_tokens + req.completion_tokens - 1
            if req.params.input_ids is not None:
                self.pool.save(req.prompt.extend_ids(req.ids), state_tokens)
            else:
                self.pool.save(req.prompt.extend_text(req.text), state_tokens)
            self.metrics.mamba_usage.set(self.pool.usage)
        req.changed.set()

    # -- the loop --------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            batch = self._admit()
            if batch:
                await self._prefill(batch)
            elif self._running:
                await self._decode()
            else:
                self.clock.go_idle()
                self._wake.clear()
                await self._wake.wait()
            self._update_gauges()

    def _admit(self) -> list[SimRequest]:
        batch: list[SimRequest] = []
        new_tokens = 0
        if (
            self.schedule_policy == "lpm"
            and 1 < len(self._queue) <= LPM_MAX_QUEUE
            and len(self._running) < self.max_running
        ):
            # SGLang's LPM: the longest cached prefix first, ties in arrival order (a stable
            # sort). Its prefix match refreshes the matched checkpoints' LRU position, as
            # match() does here.
            lengths = {id(r): self.pool.match(r.prompt)[0] for r in self._queue}
            self._queue = deque(sorted(self._queue, key=lambda r: -lengths[id(r)]))
        while self._queue and len(self._running) + len(batch) < self.max_running:
            req = self._queue[0]
            if req.done:
                self._queue.popleft()
                continue
            cached, restored = self.pool.match(req.prompt)
            uncached = req.prompt_tokens - cached
            if batch and new_tokens + uncached > self.prefill_batch_tokens:
                break
            self._queue.popleft()
            self._queued -= 1
            req.cached_tokens = cached
            req.restored_checkpoint = restored
            req.phase = Phase.PREFILL
            batch.append(req)
            new_tokens += uncached
        return batch

    async def _step(self, seconds: float) -> float:
        """Sleep one modelled step; returns its wall duration."""
        started = self._loop.time()
        await asyncio.sleep(self.clock.begin_step(seconds))
        self.clock.end_step(seconds)
        return self._loop.time() - started

    async def _prefill(self, batch: list[SimRequest]) -> None:
        # One image request sends the whole batch down the hybrid route (MEDIA.md 2.5).
        hybrid = any(r.images for r in batch)
        for req in batch:
            if req.images:
                times = self.perf.image_seconds(req.images, req.cached_tokens, req.images_end)
                req.model.preprocess_seconds, req.model.vision_seconds = times
        seconds = self.perf.prefill_batch_seconds(
            [(r.prompt_tokens, r.cached_tokens) for r in batch], hybrid=hybrid
        ) + sum(r.model.vision_seconds + r.model.preprocess_seconds for r in batch)
        seconds += sum(self._head_cut_seconds(req, hybrid) for req in batch)
        start_model = self.model_now()
        now = self._loop.time()
        for req in batch:
            req.model.prefill_start = start_model
            req.model.prefill_seconds = seconds
            req.model.prefill_path = "hybrid" if hybrid else "layerwise"
            self.metrics.queue_time.observe(now - req.wall_arrival)
            self.metrics.record_prefill(req.prompt_tokens, req.cached_tokens)
            if self.pool.is_head(req.restored_checkpoint):
                self.metrics.head_checkpoints_restored.inc()
            self._running[req.rid] = req
        self.metrics.queued.set(self._queued)
        self.metrics.running.set(len(self._running))
        await self._step(seconds)
        for req in batch:
            if req.done:
                continue
            req.prompt_checkpoint = self.pool.save(req.prompt)
            head = req.params.head_tokens
            if head is not None and self.pool.save_head(req.prompt, head, req.cached_tokens):
                self.metrics.head_checkpoints_saved.inc()
            req.phase = Phase.DECODE
            req.model.first_token = self.clock.model
            if req.params.max_new_tokens == 0:
                self._finish(req, {"type": "length", "length": 0}, on_token=False)
                continue
            self._emit(req)
        self.metrics.mamba_usage.set(self.pool.usage)

    def _head_cut_seconds(self, req: SimRequest, hybrid: bool) -> float:
        """What the engine's prefill cut at the request's head adds (one more forward)."""
        head = req.params.head_tokens
        cut = None if head is None else self.pool.head_cut(req.prompt, head, req.cached_tokens)
        if cut is None:
            return 0.0
        return self.perf.split_prefill_extra_seconds(
            req.prompt_tokens, req.cached_tokens, cut, hybrid=hybrid
        )

    async def _decode(self) -> None:
        batch = [r for r in self._running.values() if r.phase is Phase.DECODE]
        if not batch:
            # Only prefilling or parked requests hold slots: nothing to step.
            self._wake.clear()
            await self._wake.wait()
            return
        context = max(r.context_tokens for r in batch)
        seconds = self.perf.decode_step_seconds(context, len(batch))
        wall = await self._step(seconds)
        emitted = 0
        for req in batch:
            if req.phase is not Phase.DECODE:
                continue
            req.model.decode_steps += 1
            req.model.decode_seconds += seconds
            self._emit(req)
            emitted += 1
        if wall > 0:
            self.metrics.gen_throughput.set(emitted / wall)

    def _update_gauges(self) -> None:
        self.metrics.running.set(len(self._running))
        self.metrics.queued.set(self._queued)
        used = sum(r.context_tokens for r in self._running.values())
        self.metrics.token_usage.set(min(1.0, used / self.max_total_tokens))

    def _emit(self, req: SimRequest) -> None:
        """Produce req's next token and check whether it finishes the request."""
        fault = req.fault
        if (
            fault is not None
            and fault.kind is FaultKind.STALL
            and len(req.ids) >= max(1, fault.after_tokens)
        ):
            req.phase = Phase.PARKED
            self._running.pop(req.rid, None)
            return
        natural_end = False
        if req.plan_pos >= len(req.plan) and req.params.ignore_eos:
            req.plan.extend(self._filler(req))
        if req.plan_pos < len(req.plan):
            piece = req.plan[req.plan_pos]
            req.plan_pos += 1
            token = piece_id(piece)
        else:
            piece, token, natural_end = "", self.eos_token_id, True
        req.add_token(token, piece)
        now = self._loop.time()
        if req.wall_last_token is None:
            req.wall_first_token = now
            self.metrics.ttft.observe(now - req.wall_arrival)
            model_ttft = (req.model.first_token or self.clock.model) - req.model.arrival
            self.timings.append(
                (
                    req.rid,
                    req.params.request_id,
                    req.perf_arrival,
                    time.perf_counter(),
                    model_ttft,
                )
            )
        else:
            self.metrics.itl.observe(now - req.wall_last_token)
        req.wall_last_token = now
        self.metrics.generation_tokens.inc()
        finish, visible = check_finish(req, piece, token, natural_end)
        req.visible.append(visible)
        if finish is not None:
            self._finish(req, finish, on_token=True, model_t=self.clock.model)
        else:
            req.changed.set()
