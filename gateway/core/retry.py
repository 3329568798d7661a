"""Hop 3 helpers for Run: the request's session key and the retry rules before first byte."""

from __future__ import annotations

import random

from gateway.core.images import stable_parts
from gateway.core.request import CoreRequest
from gateway.errors import (
    EngineUnreachableError,
    GatewayError,
    NoReplicaError,
    UpstreamError,
    UpstreamStreamError,
    UpstreamTimeoutError,
)
from gateway.routing import Outcome
from gateway.routing.session_key import session_key
from gateway.settings import RoutingSettings


def request_session_key(request: CoreRequest, settings: RoutingSettings) -> str:
    hints = request.session
    header = hints.header
    if header and hints.conversation:
        # A subagent's conversation has its own prompt and checkpoint: its own key.
        header = f"{header}\0{hints.conversation}"
    messages = request.messages
    if request.images and not header:
        messages = stable_parts(messages, request.images)
    return session_key(header, hints.body, settings.session_fields, messages, request.tools)


def classify_failure(exc: GatewayError) -> tuple[Outcome, bool]:
    """How a failed /generate counts against its replica, and whether another replica may
    succeed. Not retried: the engine's 4xx (any replica would refuse it) and timeouts (the
    request may be running)."""
    if isinstance(exc, EngineUnreachableError):
        return Outcome.CONNECT_FAILED, True
    # An engine's 503 (full or not ready), another 5xx, or a connection cut before any answer.
    if isinstance(exc, NoReplicaError | UpstreamError) and not isinstance(exc, UpstreamStreamError):
        return Outcome.UPSTREAM_ERROR, True
    if isinstance(exc, UpstreamTimeoutError):
        return Outcome.UPSTREAM_ERROR, False
    return Outcome.REJECTED, False


def backoff_s(attempt: int, settings: RoutingSettings, rng: random.Random) -> float:
    """Exponential backoff with full jitter, capped (attempt 1 is the first retry)."""
    ceiling = min(settings.backoff_max_s, settings.backoff_s * 2 ** (attempt - 1))
    return rng.uniform(0.0, ceiling)
