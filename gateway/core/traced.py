"""What one request's trace says of the core's hops (gateway.observability.tracing has the why).

Run calls these only when the request is traced. The engine call is a live CLIENT span (its id
goes to the engine as `traceparent`); the other stages are spans made when the request ends,
from the times its RequestRecord kept. Never prompt or answer text: counts, names, outcomes.
"""

from __future__ import annotations

import functools
import time
from typing import Any
from urllib.parse import urlsplit

from gateway.core.relay import Relay
from gateway.core.request import CoreRequest
from gateway.errors import GatewayError
from gateway.observability import tracing as t
from gateway.observability.otlp_export import KIND_CLIENT
from gateway.observability.timeline import RequestRecord
from gateway.observability.tracing import LiveSpan, RequestTrace
from gateway.routing import Outcome, Replica
from gateway.routing.picker import Pick

# The engine's API: SGLang, whatever model it serves.
PROVIDER = "sglang"
OPERATION = "chat"


def engine_span(
    trace: RequestTrace, request: CoreRequest, replica: Replica, attempt: int
) -> LiveSpan:
    """The engine call about to be sent (one per attempt), named as GenAI spans are."""
    if not trace.recording:
        return trace.unrecorded_child()  # it carries the trace to the engine, nothing more
    attributes: dict[str, Any] = {
        t.GEN_AI_OPERATION: OPERATION,
        t.GEN_AI_PROVIDER: PROVIDER,
        t.GEN_AI_REQUEST_MODEL: request.model,
        t.GEN_AI_REQUEST_STREAM: request.stream,
        "flashbox.replica": replica.name,
        "flashbox.attempt": attempt,
    }
    sampling = request.sampling
    if sampling.max_tokens is not None:
        attributes[t.GEN_AI_REQUEST_MAX_TOKENS] = sampling.max_tokens
    if sampling.temperature is not None:
        attributes[t.GEN_AI_REQUEST_TEMPERATURE] = sampling.temperature
    if sampling.top_p is not None:
        attributes[t.GEN_AI_REQUEST_TOP_P] = sampling.top_p
    host, port = _address(replica.base_url)
    if host:
        attributes["server.address"] = host
    if port:
        attributes["server.port"] = port
    return trace.start_child(f"{OPERATION} {request.model}", attributes, kind=KIND_CLIENT)


@functools.lru_cache(maxsize=256)  # a replica's address, parsed once (a pure function's memo)
def _address(base_url: str) -> tuple[str | None, int | None]:
    parts = urlsplit(base_url)
    return parts.hostname, parts.port


def engine_failed(span: LiveSpan, error: GatewayError) -> None:
    """An attempt the engine did not take (retried elsewhere, or the request's error)."""
    span.set({"error.type": type(error).__name__})
    span.end(error=error.code or type(error).__name__)


def close(
    trace: RequestTrace,
    request: CoreRequest,
    record: RequestRecord,
    outcome: Outcome,
    pick: Pick | None,
    relay: Relay | None,
    engine: LiveSpan | None,
    engine_sent: float,
) -> None:
    """The request is over: its stage spans, and the engine span's results, then its end."""
    if not trace.recording:
        return  # nothing is recorded (the engine span, if any, records nothing either)
    now = time.perf_counter()
    end_ns = trace.ns(now)
    stages = record.stages
    if relay is not None and relay.failed:
        outcome = Outcome.UPSTREAM_ERROR
    elif relay is not None and relay.refused:
        outcome = Outcome.REJECTED
    usage = relay.usage if relay is not None else None
    summary: dict[str, Any] = {
        t.GEN_AI_OPERATION: OPERATION,
        t.GEN_AI_REQUEST_MODEL: request.model,
        "flashbox.api": request.api,
        "flashbox.outcome": str(outcome),
    }
    if usage is not None:
        summary[t.GEN_AI_INPUT_TOKENS] = usage.prompt_tokens
        summary[t.GEN_AI_OUTPUT_TOKENS] = usage.completion_tokens
        summary[t.GEN_AI_CACHE_READ_TOKENS] = usage.cached_tokens
    if record.first_token_at is not None:
        summary["flashbox.ttft_s"] = record.first_token_at - record.arrival
    if pick is not None:
        summary["flashbox.replica"] = pick.replica.name
    trace.set(summary)
    _stages(trace, request, stages, pick, end_ns)
    if engine is None:
        return
    engine.set(_engine_results(record, relay, pick, engine_sent, outcome))
    failed = outcome is Outcome.UPSTREAM_ERROR
    engine.end(end_ns, error=str(outcome) if failed else None)


def _stages(
    trace: RequestTrace,
    request: CoreRequest,
    stages: dict[str, float],
    pick: Pick | None,
    end_ns: int,
) -> None:
    at = trace.at
    queue = stages.get("queue")
    if queue is None:
        return  # refused before the hops began: the server and admission spans say it all
    before_render = queue
    if "media" in stages:
        before_render = stages["media"]
        images = len(request.images.slots) if request.images else 0
        trace.child("media", at(queue), at(before_render), {"flashbox.media.images": images})
    render = stages.get("render")
    if render is None:
        return
    trace.child("render", at(before_render), at(render))
    route = stages.get("route")
    if route is None:
        return
    routed: dict[str, Any] = {}
    if pick is not None:
        routed = {
            "flashbox.replica": pick.replica.name,
            "flashbox.affinity": pick.affinity,
            "flashbox.lineage.kind": pick.kind,
            "flashbox.checkpoint.promised_tokens": pick.promised_tokens,
        }
    # Routing includes counting the prompt's head and fitting the context, both before the pick.
    trace.child("route", at(render), at(route), routed)
    slot = stages.get("slot")
    if slot is None:
        return
    trace.child("fair_queue", at(route), at(slot), {"flashbox.fair_queue.wait_s": slot - route})
    first_byte = stages.get("upstream_first_byte")
    if first_byte is not None:
        trace.child("relay", at(first_byte), end_ns, {t.GEN_AI_REQUEST_STREAM: request.stream})


def _engine_results(
    record: RequestRecord,
    relay: Relay | None,
    pick: Pick | None,
    engine_sent: float,
    outcome: Outcome,
) -> dict[str, Any]:
    results: dict[str, Any] = {"flashbox.outcome": str(outcome)}
    usage = relay.usage if relay is not None else None
    if usage is not None:
        results[t.GEN_AI_INPUT_TOKENS] = usage.prompt_tokens
        results[t.GEN_AI_OUTPUT_TOKENS] = usage.completion_tokens
        results[t.GEN_AI_CACHE_READ_TOKENS] = usage.cached_tokens
        if usage.reasoning_tokens:
            results[t.GEN_AI_REASONING_TOKENS] = usage.reasoning_tokens
        results["flashbox.checkpoint.outcome"] = _checkpoint(pick, usage.cached_tokens)
    reason = relay.finish_reason if relay is not None else None
    if reason is not None:
        results[t.GEN_AI_FINISH_REASONS] = (reason,)
    first = record.first_token_at
    if first is not None:
        results[t.GEN_AI_TIME_TO_FIRST_CHUNK] = max(0.0, first - engine_sent)
        results["flashbox.ttft_s"] = first - record.arrival
        first_byte = record.stages.get("upstream_first_byte")
        if first_byte is not None:
            # The engine answers its headers at once and its first token after its queue and
            # prefill: this is both, as the gateway sees them.
            results["flashbox.engine.prefill_s"] = max(0.0, first - record.arrival - first_byte)
    return results


def _checkpoint(pick: Pick | None, cached: int) -> str:
    """restored: the engine served what routing promised from its checkpoints; missed: less;
    cached: no promise, yet some tokens came from its cache; none: nothing cached."""
    promised = pick.promised_tokens if pick is not None else 0
    if promised:
        return "restored" if cached >= promised else "missed"
    return "cached" if cached else "none"
