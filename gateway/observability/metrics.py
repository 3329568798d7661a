"""Every gateway metric, in one class, on the app's own registry (no module-level collectors).

Names are a contract with monitoring/ (dashboards and alerts): do not rename. All labels are
bounded: model is one of the configured served names (or "unknown"), code an HTTP status, and
the other labels take values from fixed sets in the code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterable
from typing import TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_CONTENT_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from gateway.observability.token_histogram import TokenGapHistogram

TTFT_BUCKETS = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0,
    900.0, 1200.0, 1800.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
    3600.0,
)  # fmt: skip
RATE_BUCKETS = (
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 500.0, 1000.0, 2000.0,
    5000.0, 10000.0, 50000.0,
)  # fmt: skip
RENDER_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip

# flashbox_ttft_stage_seconds{stage}: time from request arrival to the end of each stage.
# "media": images resolved and checked (gateway/media), before rendering; only requests with
# images have it. "slot": a running slot on the replica taken (gateway/fairness.py); after
# "route" by the time the request waited for its fair turn.
STAGES = ("queue", "media", "render", "route", "slot", "upstream_first_byte",
          "first_reasoning_token", "first_content_token")  # fmt: skip
# flashbox_upstream_aborts_total{phase}: where the request was when the client left
# ("error": the gateway failed the request itself, a bug, and stopped its generation).
ABORT_PHASES = ("queued", "before_first_token", "streaming", "non_streaming", "error")
# flashbox_upstream_connections_in_use{pool}
CONNECTION_POOLS = ("generation", "control", "count")
# flashbox_routing_outstanding{kind}: gateway.routing.picker.Outstanding's fields.
OUTSTANDING_PICKS = ("picks", "trials")
# The gauges that are 0 whenever no request runs (a test's and the soak's idle check, and the
# FlashboxResourcesHeldWhileIdle alert's reading).
IDLE_GAUGES = (
    "flashbox_upstream_connections_in_use",
    "flashbox_requests_in_flight",
    "flashbox_fair_queue_waiting",
    "flashbox_admission_queued",
    "flashbox_routing_outstanding",
)
# flashbox_rate_limited_total{limit,source}: the per-key bucket a refused request hit, and where
# it was counted: in the shared store, or in this gateway's own buckets (gateway/ratelimit.py).
RATE_LIMITS = ("requests", "tokens")
RATE_LIMIT_SOURCES = ("shared", "local")
# flashbox_response_store_writes_total{outcome}: where a `store: true` response went: the shared
# store, this gateway only (no state_url, or the store failed), or this gateway only because it
# is over responses.shared_max_entry_bytes.
RESPONSE_STORE_OUTCOMES = ("shared", "local", "local_too_large")
# flashbox_media_*: where an image came from (a data: URL in the request, or a fetched URL).
MEDIA_SOURCES = ("data", "url")
# flashbox_media_rejected_total{reason}: one per refused request. Each reason is also the error
# code the client sees (gateway/media/errors.py types them; a test keeps the two equal).
MEDIA_REJECT_REASONS = (
    "images_not_supported", "too_many_images", "unsupported_image_source", "malformed_image_url",
    "malformed_data_url", "invalid_base64", "unsupported_image_type", "unsupported_image_format",
    "image_too_large", "media_request_too_large", "image_too_many_pixels", "image_aspect_ratio",
    "image_tokens_exceeded", "bad_image", "remote_images_disabled", "image_host_not_allowed",
    "insecure_image_url", "image_address_denied", "image_redirect_denied", "image_fetch_timeout",
    "image_fetch_failed",
)  # fmt: skip
# flashbox_discovery_errors_total{reason}: a DNS lookup of discovery.dns_name that changed
# nothing: it failed, timed out, or answered no address (gateway/routing/discovery.py).
DISCOVERY_ERROR_REASONS = ("failed", "timeout", "empty")
# flashbox_state_errors_total{kind}: a shared-store round trip that failed
# (gateway/shared_state.py): it timed out, the connection failed, or the store answered an error.
STATE_ERROR_KINDS = ("timeout", "connection", "error")
# flashbox_state_claims_total{result}: what became of a placement written to the shared store
# (gateway/routing/fleet.py).
STATE_CLAIM_RESULTS = ("won", "same", "adopted", "unsent")
# Head warms (gateway/routing/warm.py): saved (the engine prefilled the head there), failed
# (it did not answer, or answered an error).
HEAD_WARM_OUTCOMES = ("saved", "failed")
# flashbox_output_checkpoint_total{outcome} (gateway.routing.affinity, "the output promise").
OUTPUT_CHECKPOINT_OUTCOMES = ("restored", "lost")
# Shared-store round trips: loopback or one network hop, bounded by state.timeout_s (5 ms).
STATE_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.1)
MEDIA_BYTES_BUCKETS = (
    1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 2097152.0, 4194304.0, 8388608.0,
    16777216.0, 33554432.0,
)  # fmt: skip
MEDIA_FETCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0)
# Image tokens incl. the 2 markers: 11 is the smallest image; 802 and 4,002 are the caps at
# engine max_pixels 1,254,400 and 6,272,000.
MEDIA_TOKEN_BUCKETS = (
    11.0, 32.0, 64.0, 128.0, 256.0, 400.0, 600.0, 802.0, 1200.0, 2000.0, 3000.0, 4002.0,
)  # fmt: skip


_Metric = TypeVar("_Metric", bound=MetricWrapperBase)


class Metrics:
    def __init__(self, *, process_metrics: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Children by (metric, label values): every label set here is bounded (see above).
        self._children: dict[tuple[Hashable, tuple[str, ...]], MetricWrapperBase] = {}
        reg = self.registry
        if process_metrics:
            ProcessCollector(registry=reg)
            PlatformCollector(registry=reg)
            GCCollector(registry=reg)

        # api: the face a request came through ("openai", "anthropic", ...; a fixed set).
        self.requests = Counter(
            "flashbox_requests", "Generation requests answered, by status code and API.",
            ["model", "code", "api"], registry=reg,
        )  # fmt: skip
        self.in_flight = Gauge(
            "flashbox_requests_in_flight", "Chat requests being served now.", registry=reg
        )
        self.ttft = Histogram(
            "flashbox_ttft_seconds",
            "Request arrival to the first generated token sent (reasoning, content or tool call).",
            ["model", "api"], buckets=TTFT_BUCKETS, registry=reg,
        )  # fmt: skip
        self.ttft_stage = Histogram(
            "flashbox_ttft_stage_seconds",
            "Request arrival to the end of each stage on the way to the first token.",
            ["stage"], buckets=TTFT_BUCKETS, registry=reg,
        )  # fmt: skip
        # Observed per relayed token: a lighter collector than prometheus_client's Histogram.
        self.itl = TokenGapHistogram(
            "flashbox_inter_token_latency_seconds",
            "Gap between generated tokens as relayed (a chunk's gap spread over its tokens).",
            "model", ITL_BUCKETS, reg,
        )  # fmt: skip
        self.e2e = Histogram(
            "flashbox_e2e_latency_seconds", "Request arrival to the last byte sent.",
            ["model"], buckets=E2E_BUCKETS, registry=reg,
        )  # fmt: skip
        self.prompt_tokens = Counter(
            "flashbox_prompt_tokens", "Prompt tokens, as counted by the engine.",
            ["model"], registry=reg,
        )  # fmt: skip
        self.cached_tokens = Counter(
            "flashbox_cached_tokens", "Prompt tokens the engine served from its prefix cache.",
            ["model"], registry=reg,
        )  # fmt: skip
        self.generated_tokens = Counter(
            "flashbox_generated_tokens", "Completion tokens generated.", ["model"], registry=reg
        )
        self.decode_rate = Histogram(
            "flashbox_decode_tokens_per_second",
            "Per request: (completion tokens - 1) / (e2e - TTFT).",
            ["model"], buckets=RATE_BUCKETS, registry=reg,
        )  # fmt: skip
        self.prefill_rate = Histogram(
            "flashbox_prefill_tokens_per_second",
            "Per request: uncached prompt tokens / TTFT.",
            ["model"], buckets=RATE_BUCKETS, registry=reg,
        )  # fmt: skip
        self.render_seconds = Histogram(
            "flashbox_template_render_seconds", "Chat-template rendering time.",
            ["renderer"], buckets=RENDER_BUCKETS, registry=reg,
        )  # fmt: skip
        # lineage: main, subagent or side (gateway.routing.lineage).
        self.affinity = Counter(
            "flashbox_affinity", "Routing decisions by outcome and lineage kind.",
            ["outcome", "lineage"], registry=reg,
        )  # fmt: skip
        self.output_checkpoints = Counter(
            "flashbox_output_checkpoint",
            "Pinned turns that restored their previous prompt's checkpoint and carried the "
            "previous answer back, that answer having crossed a track point, by whether the "
            "engine also restored the later checkpoint of prompt and answer together (lost: "
            "the answer's text tokenizes to other tokens than the engine sampled, or that "
            "checkpoint was evicted first).",
            ["outcome"], registry=reg,
        )  # fmt: skip
        for outcome in OUTPUT_CHECKPOINT_OUTCOMES:
            self.output_checkpoints.labels(outcome=outcome)
        self.head_warms = Counter(
            "flashbox_head_warms",
            "Prompt heads prefilled on a replica that did not hold them, with no user waiting "
            "(gateway/routing/warm.py), by outcome.",
            ["outcome"], registry=reg,
        )  # fmt: skip
        for outcome in HEAD_WARM_OUTCOMES:
            self.head_warms.labels(outcome=outcome)
        self.replica_up = Gauge(
            "flashbox_replica_up", "1 when the replica passes health checks.",
            ["replica"], registry=reg,
        )  # fmt: skip
        self.replica_breaker_open = Gauge(
            "flashbox_replica_breaker_open",
            "1 while the replica's circuit breaker is open or half-open: its requests failed "
            "(connection refused, timeout, 5xx, a broken stream; a client's 4xx never counts).",
            ["replica"], registry=reg,
        )  # fmt: skip
        self.replica_in_flight = Gauge(
            "flashbox_replica_in_flight", "Requests the gateway has open on each replica.",
            ["replica"], registry=reg,
        )  # fmt: skip
        self.errors = Counter(
            "flashbox_errors", "Failed requests and stream faults, by kind and API.",
            ["kind", "api"], registry=reg,
        )  # fmt: skip
        self.upstream_aborts = Counter(
            "flashbox_upstream_aborts",
            "abort_request calls sent to the engine after a client left, by phase.",
            ["phase"], registry=reg,
        )  # fmt: skip
        self.retries = Counter(
            "flashbox_retries", "Requests retried on another replica.", registry=reg
        )
        # Read at scrape time from the pools themselves (gateway.upstream.client): a request
        # path that forgets to give a connection back shows here, not as a later outage.
        self.upstream_connections_in_use = Gauge(
            "flashbox_upstream_connections_in_use",
            "Engine connections taken by a request or call and not given back, by pool: "
            "generation (/generate), control (health probes, aborts), count (/tokenize).",
            ["pool"], registry=reg,
        )  # fmt: skip
        self.routing_outstanding = Gauge(
            "flashbox_routing_outstanding",
            "What routing holds for requests now: picks routed and not yet reported or "
            "forgotten, half-open breaker trials leased. 0 whenever no request runs.",
            ["kind"], registry=reg,
        )  # fmt: skip
        self.upstream_abort_failures = Counter(
            "flashbox_upstream_abort_failures",
            "abort_request calls that failed after every retry (the engine may still run "
            "the request until its own deadline).",
            registry=reg,
        )
        self.tool_calls_rejected = Counter(
            "flashbox_tool_calls_rejected", "Tool calls the parser dropped, by reason.",
            ["reason"], registry=reg,
        )  # fmt: skip
        self.admission_rejected = Counter(
            "flashbox_admission_rejected", "Requests refused before any work, by reason.",
            ["reason"], registry=reg,
        )  # fmt: skip
        self.admission_queued = Gauge(
            "flashbox_admission_queued", "Chat requests waiting for a slot now.", registry=reg
        )
        # Fair shares of the engine's running slots (gateway/fairness.py). `key` is a key id,
        # or "anonymous" for every client address (addresses are not a bounded label).
        self.fair_queue_waiting = Gauge(
            "flashbox_fair_queue_waiting",
            "Requests waiting in the gateway for a running slot on their replica, by key.",
            ["key"], registry=reg,
        )  # fmt: skip
        self.fair_queue_wait_seconds = Histogram(
            "flashbox_fair_queue_wait_seconds",
            "How long a request that had to wait for a running slot waited, by key.",
            ["key"], buckets=TTFT_BUCKETS, registry=reg,
        )  # fmt: skip
        self.fair_share_slots = Gauge(
            "flashbox_fair_share_slots",
            "This gateway's share of each replica's running slots (its max_running_requests "
            "without a shared store; drawn with the other gateways' demand with one).",
            ["replica"], registry=reg,
        )  # fmt: skip
        self.fair_queue_rejected = Counter(
            "flashbox_fair_queue_rejected",
            "Requests refused by the fair queue: key_queue_full and queue_full (429), "
            "timeout (503).",
            ["key", "reason"], registry=reg,
        )  # fmt: skip
        self.response_store_entries = Gauge(
            "flashbox_response_store_entries",
            "Responses kept for previous_response_id and GET /v1/responses/{id}.",
            registry=reg,
        )
        self.response_store_bytes = Gauge(
            "flashbox_response_store_bytes", "Size of the kept responses.", registry=reg
        )
        self.response_store_writes = Counter(
            "flashbox_response_store_writes",
            "Responses stored (store: true), by where they went (shared store or this gateway).",
            ["outcome"], registry=reg,
        )  # fmt: skip
        # Per-key rate limits (gateway/ratelimit.py); also in admission_rejected as
        # reason="rate_limited".
        self.rate_limited = Counter(
            "flashbox_rate_limited",
            "Requests refused by a per-key rate limit, by the limit hit and where it was counted.",
            ["limit", "source"], registry=reg,
        )  # fmt: skip
        self.rate_limit_checks = Counter(
            "flashbox_rate_limit_checks",
            "Rate-limit decisions, by where they were made: the shared store, or this gateway's "
            "own buckets (no state_url, or the store failed).",
            ["source"], registry=reg,
        )  # fmt: skip
        for outcome in RESPONSE_STORE_OUTCOMES:
            self.response_store_writes.labels(outcome=outcome)
        for source in RATE_LIMIT_SOURCES:
            self.rate_limit_checks.labels(source=source)
            for limit in RATE_LIMITS:
                self.rate_limited.labels(limit=limit, source=source)
        for phase in ABORT_PHASES:
            self.upstream_aborts.labels(phase=phase)

        # Images (gateway/media): counted once each image has passed every check.
        self.media_images = Counter(
            "flashbox_media_images", "Images accepted, by source (data URL or fetched URL).",
            ["source"], registry=reg,
        )  # fmt: skip
        self.media_bytes = Histogram(
            "flashbox_media_bytes", "Size of each accepted image as received (decoded bytes).",
            ["source"], buckets=MEDIA_BYTES_BUCKETS, registry=reg,
        )  # fmt: skip
        self.media_fetch_seconds = Histogram(
            "flashbox_media_fetch_seconds",
            "Time to fetch one image URL (resolution, redirects and body), failed fetches too.",
            buckets=MEDIA_FETCH_BUCKETS, registry=reg,
        )  # fmt: skip
        self.media_check_seconds = Histogram(
            "flashbox_media_check_seconds",
            "Time to decode, check and re-encode one image (base64, Pillow, digest).",
            buckets=RENDER_BUCKETS, registry=reg,
        )  # fmt: skip
        self.media_rejected = Counter(
            "flashbox_media_rejected", "Requests refused by the media stage, by reason.",
            ["reason"], registry=reg,
        )  # fmt: skip
        self.media_image_tokens = Histogram(
            "flashbox_media_image_tokens",
            "Estimated prompt tokens of each accepted image (the engine's resize rule, markers "
            "included).",
            buckets=MEDIA_TOKEN_BUCKETS, registry=reg,
        )  # fmt: skip
        for source in MEDIA_SOURCES:
            self.media_images.labels(source=source)

        # DNS discovery of the engines (discovery.dns_name).
        self.discovery_errors = Counter(
            "flashbox_discovery_errors",
            "DNS lookups of the engines' name that kept the last known replicas, by reason.",
            ["reason"], registry=reg,
        )  # fmt: skip
        self.discovery_replicas = Gauge(
            "flashbox_discovery_replicas",
            "Engine replicas the DNS name resolved to at its last successful lookup.",
            registry=reg,
        )
        for reason in DISCOVERY_ERROR_REASONS:
            self.discovery_errors.labels(reason=reason)

        # The shared state store (state_url; gateway/shared_state.py).
        self.state_errors = Counter(
            "flashbox_state_errors",
            "Shared-store round trips that failed; the gateway went on with local state.",
            ["kind"], registry=reg,
        )  # fmt: skip
        self.state_up = Gauge(
            "flashbox_state_up",
            "1 while the shared store answers, 0 while the gateway routes on local state "
            "(absent without state_url).",
            registry=reg,
        )
        self.state_moves_heard = Gauge(
            "flashbox_state_moves_heard",
            "1 while the gateway is subscribed to the pins other gateways move, so its pinned "
            "turns go before the store answers (gateway/routing/moves.py); 0: they wait.",
            registry=reg,
        )
        self.state_seconds = Histogram(
            "flashbox_state_seconds", "Shared-store round-trip time, by operation.",
            ["op"], buckets=STATE_BUCKETS, registry=reg,
        )  # fmt: skip
        for kind in STATE_ERROR_KINDS:
            self.state_errors.labels(kind=kind)
        # Placements written to the shared store (gateway/routing/fleet.py).
        self.state_claims = Counter(
            "flashbox_state_claims",
            "Pins claimed in the shared store, by result: won (written), same (another gateway "
            "had pinned the lineage to the same replica), adopted (it had pinned it elsewhere: "
            "the request went there), unsent (the store did not answer: written once it "
            "does).",
            ["result"], registry=reg,
        )  # fmt: skip
        for result in STATE_CLAIM_RESULTS:
            self.state_claims.labels(result=result)
        self.state_writes_skipped = Counter(
            "flashbox_state_writes_skipped",
            "Turn reports not written to the shared store because state.max_pending_writes "
            "were already waiting.",
            registry=reg,
        )
        for reason in MEDIA_REJECT_REASONS:
            self.media_rejected.labels(reason=reason)

    def child(self, metric: _Metric, *values: str) -> _Metric:
        """`metric.labels(*values)` (in label order), looked up once: labels() validates its
        arguments and takes a lock on every call, a dozen times per request."""
        key = (metric, values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found  # type: ignore[return-value]  # stored under its own metric's key

    def register_replicas(self, names: Iterable[str]) -> None:
        for name in names:
            self.replica_up.labels(replica=name).set(0)
            self.replica_breaker_open.labels(replica=name).set(0)
            self.replica_in_flight.labels(replica=name).set(0)

    def forget_replica(self, name: str) -> None:
        """A replica that left DNS discovery: its flashbox_replica_up series ends (no dashboard
        line or label kept for every address a pod ever had). flashbox_replica_in_flight stays:
        requests still open there count down on it."""
        self.replica_up.remove(name)
        with contextlib.suppress(KeyError):
            self.replica_breaker_open.remove(name)

    def drop_replica(self, name: str) -> None:
        """A replica routing forgot (gone from DNS long enough, nothing open there): its
        flashbox_replica_in_flight series ends too, and its cached children go."""
        with contextlib.suppress(KeyError):
            self.replica_up.remove(name)
        with contextlib.suppress(KeyError):
            self.replica_in_flight.remove(name)
        for key in [key for key in self._children if name in key[1]]:
            del self._children[key]

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The registry in the format the scraper's Accept header asks for: OpenMetrics (which
        carries the TTFT and e2e histograms' exemplars, a traced request's trace id) when it
        names application/openmetrics-text, as Prometheus does; else the text format."""
        if accept and "application/openmetrics-text" in accept:
            # prometheus_client leaves this one function unannotated.
            text = openmetrics_latest(self.registry)  # type: ignore[no-untyped-call]
            return text, OPENMETRICS_CONTENT_TYPE
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
