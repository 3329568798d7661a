"""Hop 3 helpers for ChatRun: the request's session key and the retry rules before first byte."""

from __future__ import annotations

import random
from typing import Any

from gateway.errors import (
    EngineUnreachableError,
    GatewayError,
    NoReplicaError,
    UpstreamError,
    UpstreamStreamError,
    UpstreamTimeoutError,
)
from gateway.routes.chat_input import ChatInput
from gateway.routing import Outcome
from gateway.routing.session_key import session_key
from gateway.settings import RoutingSettings


def request_session_key(chat: ChatInput, header: str | None, settings: RoutingSettings) -> str:
    body: dict[str, Any] = dict(chat.request.model_extra or {})
    if chat.request.user is not None:
        body["user"] = chat.request.user
    return session_key(header, body, settings.session_fields, chat.messages, chat.tools)


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
