"""How many sessions a replica can hold, and the spill cost model (docs/affinity.md).

Session budget. A session's turn touches the checkpoint it restores from (the engine keeps it
until LRU eviction) and adds a new one when it ends; a running request also holds its prompt's
checkpoint. A session's latest checkpoint survives until its next turn only if everything
touched meanwhile fits in the pool. In the worst case every other session takes a turn in
between: with S slots, R running requests, N sessions and k = checkpoints_per_session,
k (N - 1) + R + 1 <= S, so N = (S - R - 1) / k + 1 (176 sessions for 192 slots, 16 running and
k = 1: superseded checkpoints are evicted first; 88 with k = 2).

Spilling a pinned session costs a miss: its whole context is prefilled again instead of only the
new suffix. Staying costs the wait for a running slot at its replica. Both in engine seconds:

    miss_extra_s(tokens) = max(0, tokens / prefill_tokens_per_s - hit_ttft_s)
    wait_s(replica)      = max(0, in_flight + 1 - max_running) * service_s / max_running

The prefill a request adds to its replica's queue, for placing a new lineage where its head's
checkpoint is or elsewhere (the engine prefills one batch at a time, so a prompt waits behind
the ones sent before it):

    prefill_s(tokens, cached) = max(hit_ttft_s, (tokens - cached) / prefill_tokens_per_s)

A pinned session spills only when wait_s(pinned) > 2 miss_extra_s(context) — its own miss, and
the one its stale checkpoint causes in the pool it left once that pool is full — and only to a
replica with a free running slot (wait_s = 0) and room in its budget: a re-prefill added to
another queue delays everyone behind it.
"""

from __future__ import annotations

from gateway.routing.replica import Replica
from gateway.settings import RoutingSettings


def slots(replica: Replica, settings: RoutingSettings) -> int:
    return replica.checkpoint_slots or settings.checkpoint_slots


def track_interval(replica: Replica, settings: RoutingSettings) -> int:
    return replica.track_interval or settings.track_interval


def max_running(replica: Replica, settings: RoutingSettings) -> int:
    return replica.max_running_requests or settings.max_running_requests


def budget_for(slots: int, max_running: int, checkpoints_per_session: float) -> int:
    return max(1, int((slots - max_running - 1) / checkpoints_per_session) + 1)


def session_budget(replica: Replica, settings: RoutingSettings) -> int:
    return budget_for(
        slots(replica, settings),
        max_running(replica, settings),
        settings.checkpoints_per_session,
    )


def wait_s(replica: Replica, settings: RoutingSettings) -> float:
    running = max_running(replica, settings)
    queued = max(0, replica.in_flight + 1 - running)
    return queued * settings.service_s / running


def miss_extra_s(prompt_chars: int, settings: RoutingSettings) -> float:
    tokens = prompt_chars / settings.chars_per_token
    return max(0.0, tokens / settings.prefill_tokens_per_s - settings.hit_ttft_s)


def prompt_tokens(prompt_chars: int, extra_tokens: int, settings: RoutingSettings) -> float:
    """A prompt's tokens estimated from its characters, plus what images add."""
    return prompt_chars / settings.chars_per_token + extra_tokens


def prefill_s(tokens: float, cached_tokens: int, settings: RoutingSettings) -> float:
    """Engine seconds until a prompt's first token with `cached_tokens` restored: a hit's floor
    (the restore and the suffix), or the cold prefill of what is not cached."""
    return max(settings.hit_ttft_s, (tokens - cached_tokens) / settings.prefill_tokens_per_s)
