"""Hop 3 helpers for Run: the request's session key and the retry rules before first byte."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

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
from gateway.media.refs import CheckedImage
from gateway.routing import Outcome
from gateway.routing.lineage import declared_kind
from gateway.routing.replica import RequestContext
from gateway.routing.session_key import lineage_key, named_session, session_key
from gateway.settings import RoutingSettings, Settings


def request_session_key(
    request: CoreRequest, settings: RoutingSettings, digests: Sequence[str] | None = None
) -> str:
    """The session's key: the one the client named (header, else body field), else the
    conversation's root. `digests`: the request's images' own, by slot (see stable_parts)."""
    hints = request.session
    named = named_session(hints.header, hints.body, settings.session_fields)
    if named is not None:
        return named
    messages = request.messages
    if request.images:
        # The root is the leading system messages and the first user message: only those.
        root = messages[: _first_user_index(messages) + 1]
        messages = stable_parts(root, request.images, digests)
    return session_key(None, hints.body, (), messages, request.tools)


def route_context(
    request: CoreRequest,
    settings: Settings,
    rid: str,
    prompt: str,
    head: str | None,
    head_tokens: int,
    images: list[CheckedImage],
    order: list[int],
    image_tokens: int,
) -> RequestContext:
    """What routing sees of a request (gateway.routing.replica.RequestContext): its session,
    its lineage within the session and the lineage's kind, its prompt head, its images
    (`images` in request order, `order` the prompt's)."""
    hints = request.session
    routing = settings.routing
    named = named_session(hints.header, hints.body, routing.session_fields)
    kind = declared_kind(hints.request_class, hints.conversation)
    tools = bool(request.tools)
    digests = [image.digest for image in images]
    image_digests = tuple(digests[i] for i in order)
    if named is None:
        # One conversation per session: its root is its key, and its only lineage.
        return RequestContext(
            rid,
            request_session_key(request, routing, digests),
            prompt,
            kind=kind,
            tools=tools,
            head=head,
            head_tokens=head_tokens,
            images=image_digests,
            image_tokens=image_tokens,
        )
    messages = request.messages
    if request.images:
        # Only the root's first user message goes into the key: sentinels become digests.
        messages = stable_parts(
            messages[: _first_user_index(messages) + 1], request.images, digests
        )
    lineage = lineage_key(named, hints.conversation, head or "", messages)
    return RequestContext(
        rid,
        named,
        prompt,
        lineage=lineage,
        kind=kind,
        tools=tools,
        head=head,
        head_tokens=head_tokens,
        compacted=hints.compacted,
        images=image_digests,
        image_tokens=image_tokens,
    )


def _first_user_index(messages: list[dict[str, Any]]) -> int:
    return next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))


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
