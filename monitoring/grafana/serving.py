"""The "flashbox — serving" dashboard: what users feel (TTFT, tokens/s) and why (stages, routes)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models.dashboard import Dashboard

from monitoring.grafana import serving_media
from monitoring.grafana.panels import (
    BYTES,
    COUNT,
    FULL_WIDTH,
    HALF_WIDTH,
    OPS,
    PER_SECOND,
    RATE,
    RATIO,
    SECONDS,
    THIRD_WIDTH,
    TOKENS_PER_SECOND,
    PanelBuilder,
    Query,
    graph,
    quantiles,
    single_stat,
    up_down_timeline,
)

UID = "flashbox-serving"
TITLE = "flashbox — serving"
GATEWAY_JOB = "flashbox-gateway"

# The summary stats look at a fixed window so the numbers at the top do not jump with the zoom.
SUMMARY_WINDOW = "5m"
STAT_WIDTH = 4


def _rate(metric: str, window: str = RATE, by: str = "", matchers: str = "") -> str:
    selector = f"{metric}{{{matchers}}}" if matchers else metric
    group = f" by ({by})" if by else ""
    return f"sum{group} (rate({selector}[{window}]))"


def _summary() -> list[PanelBuilder]:
    w = SUMMARY_WINDOW
    ttft = "flashbox_ttft_seconds_bucket"
    decode = "flashbox_decode_tokens_per_second_bucket"
    return [
        single_stat(
            "Requests/s (5m)",
            "Generation requests answered per second, any status, every API.",
            PER_SECOND,
            Query(_rate("flashbox_requests_total", w), "requests/s"),
            width=STAT_WIDTH,
        ),
        single_stat(
            "TTFT p50 (5m)",
            "Median time to first token over the last 5 minutes, as clients see it.",
            SECONDS,
            Query(f"histogram_quantile(0.5, sum by (le) (rate({ttft}[{w}])))", "p50"),
            width=STAT_WIDTH,
            warn_above=30,
        ),
        single_stat(
            "TTFT p95 (5m)",
            "95th percentile time to first token over the last 5 minutes.",
            SECONDS,
            Query(f"histogram_quantile(0.95, sum by (le) (rate({ttft}[{w}])))", "p95"),
            width=STAT_WIDTH,
            warn_above=60,
        ),
        single_stat(
            "Decode tok/s p50 (5m)",
            "Median per-request decode speed: (completion tokens - 1) / (e2e - TTFT).",
            TOKENS_PER_SECOND,
            Query(f"histogram_quantile(0.5, sum by (le) (rate({decode}[{w}])))", "p50"),
            width=STAT_WIDTH,
        ),
        single_stat(
            "In flight",
            "Chat requests the gateway is serving right now.",
            COUNT,
            Query("sum(flashbox_requests_in_flight)", "in flight"),
            width=STAT_WIDTH,
        ),
        single_stat(
            "Healthy replicas",
            "Engine replicas passing the gateway's health checks.",
            COUNT,
            Query("sum(flashbox_replica_up)", "healthy"),
            width=STAT_WIDTH,
        ),
    ]


def _latency() -> list[PanelBuilder]:
    return [
        graph(
            "Time to first token",
            "Request arrival at the gateway to the first generated token sent (reasoning, "
            "content or tool call). A checkpoint hit costs ~10 s on the reference box, a miss "
            "at 60k context ~+103 s. With tracing on, the dots are traced requests: each "
            "opens its trace.",
            SECONDS,
            quantiles("flashbox_ttft_seconds"),
            width=THIRD_WIDTH,
            exemplars=True,
        ),
        graph(
            "TTFT by API",
            "Time to first token by the API the requests came through (openai: chat "
            "completions, anthropic: Messages, ...): their clients' prompts and sessions differ.",
            SECONDS,
            quantiles("flashbox_ttft_seconds", (0.5, 0.95), by="api"),
            width=THIRD_WIDTH,
        ),
        graph(
            "TTFT by stage (p95)",
            "Request arrival to the end of each stage: queue, media (requests with images), "
            "render, route, upstream first "
            "byte, first reasoning token, first content token. The gap between two stages is "
            "where the time went.",
            SECONDS,
            quantiles("flashbox_ttft_stage_seconds", (0.95,), by="stage"),
            width=THIRD_WIDTH,
        ),
        graph(
            "Inter-token latency",
            "Gap between generated tokens as relayed to the client.",
            SECONDS,
            quantiles("flashbox_inter_token_latency_seconds"),
        ),
        graph(
            "End-to-end latency",
            "Request arrival to the last byte sent. With tracing on, the dots are traced "
            "requests: each opens its trace.",
            SECONDS,
            quantiles("flashbox_e2e_latency_seconds"),
            exemplars=True,
        ),
    ]


def _throughput() -> list[PanelBuilder]:
    return [
        graph(
            "Decode tokens/s per request",
            "Per request: (completion tokens - 1) / (e2e - TTFT). p10 is the slow tail.",
            TOKENS_PER_SECOND,
            quantiles("flashbox_decode_tokens_per_second", (0.5, 0.1)),
            width=THIRD_WIDTH,
        ),
        graph(
            "Prefill tokens/s per request",
            "Per request: uncached prompt tokens / TTFT.",
            TOKENS_PER_SECOND,
            quantiles("flashbox_prefill_tokens_per_second", (0.5, 0.1)),
            width=THIRD_WIDTH,
        ),
        graph(
            "Tokens/s, all requests",
            "Generated tokens, prompt tokens prefilled, and prompt tokens served from the "
            "engine's prefix cache, summed over requests.",
            TOKENS_PER_SECOND,
            [
                Query(_rate("flashbox_generated_tokens_total"), "generated"),
                Query(
                    f"{_rate('flashbox_prompt_tokens_total')}"
                    f" - {_rate('flashbox_cached_tokens_total')}",
                    "prefilled",
                ),
                Query(_rate("flashbox_cached_tokens_total"), "from cache"),
            ],
            width=THIRD_WIDTH,
        ),
    ]


def _traffic() -> list[PanelBuilder]:
    return [
        graph(
            "Requests/s by status",
            "Generation requests answered per second, every API, by HTTP status.",
            PER_SECOND,
            [Query(_rate("flashbox_requests_total", by="code"), "{{code}}")],
            width=THIRD_WIDTH,
            stacked=True,
        ),
        graph(
            "Requests/s by API",
            "Generation requests answered per second, any status, by the API they came through "
            "(openai: chat completions, anthropic: Messages, ...).",
            PER_SECOND,
            [Query(_rate("flashbox_requests_total", by="api"), "{{api}}")],
            width=THIRD_WIDTH,
            stacked=True,
        ),
        graph(
            "In flight",
            "Requests the gateway is serving, and those it has open on each replica.",
            COUNT,
            [
                Query("sum(flashbox_requests_in_flight)", "gateway"),
                Query("sum by (replica) (flashbox_replica_in_flight)", "{{replica}}"),
            ],
            width=THIRD_WIDTH,
        ),
        graph(
            "Errors and aborts",
            "Failed requests by kind; abort_request calls sent to an engine after the client "
            "left, by phase; retries on another replica.",
            OPS,
            [
                Query(_rate("flashbox_errors_total", by="kind"), "{{kind}}"),
                Query(_rate("flashbox_upstream_aborts_total", by="phase"), "abort {{phase}}"),
                Query(_rate("flashbox_retries_total"), "retries"),
            ],
        ),
        graph(
            "Errors by API",
            "Failed requests per second by the API they came through, and by kind.",
            OPS,
            [Query(_rate("flashbox_errors_total", by="api, kind"), "{{api}} {{kind}}")],
        ),
        graph(
            "Fair queue: waiting by key",
            "Requests waiting in the gateway for a running slot on their replica, by API key "
            "(anonymous: every client address), and the slots this gateway fills at each "
            "replica (its share of them with a shared store). docs/fairness.md.",
            COUNT,
            [
                Query("sum by (key) (flashbox_fair_queue_waiting)", "{{key}}"),
                Query("sum by (replica) (flashbox_fair_share_slots)", "slots {{replica}}"),
            ],
            width=HALF_WIDTH,
        ),
        graph(
            "Fair queue: wait by key (p95)",
            "How long the requests that waited for a running slot waited, by API key: a key "
            "that floods waits for its own requests, the others for about one slot.",
            SECONDS,
            quantiles("flashbox_fair_queue_wait_seconds", (0.95,), by="key"),
            width=HALF_WIDTH,
        ),
        graph(
            "Rejected requests and tool calls",
            "Requests refused before any work (limits, queue full, a key's share of the fair "
            "queue), and tool calls the parser dropped, by reason.",
            OPS,
            [
                Query(_rate("flashbox_admission_rejected_total", by="reason"), "{{reason}}"),
                Query(
                    _rate("flashbox_fair_queue_rejected_total", by="reason"),
                    "fair queue {{reason}}",
                ),
                Query(
                    _rate("flashbox_tool_calls_rejected_total", by="reason"), "tool call {{reason}}"
                ),
            ],
            width=FULL_WIDTH,
            height=6,
        ),
        graph(
            "Engine connections and what routing holds",
            "Engine connections taken and not given back, by pool (generation, control: probes "
            "and aborts, count: /tokenize), and routing's picks and breaker trials not yet "
            "reported. Each follows the requests in flight and falls to 0 when the gateway is "
            "idle; one that stays up while nothing runs is a leak.",
            COUNT,
            [
                Query(
                    "sum by (pool) (flashbox_upstream_connections_in_use)", "connections {{pool}}"
                ),
                Query("sum by (kind) (flashbox_routing_outstanding)", "routing {{kind}}"),
                Query(_rate("flashbox_upstream_abort_failures_total"), "aborts failed /s"),
            ],
            width=FULL_WIDTH,
        ),
    ]


HIT = 'outcome="hit"'
PINNED = 'outcome=~"hit|verified_miss"'
HEAD_HIT = 'outcome="head_hit"'
HEAD_PLACED = 'outcome=~"head_hit|head_miss"'


def _routing() -> list[PanelBuilder]:
    misses = _rate("flashbox_affinity_total", matchers='outcome="verified_miss"')
    pinned = _rate("flashbox_affinity_total", matchers='outcome=~"hit|verified_miss"')
    return [
        graph(
            "Affinity outcomes",
            "Routing decisions per second: hit (back to the replica holding the lineage's "
            "checkpoint), new, head_hit / head_miss (a new conversation placed where its "
            "prompt head's checkpoint is), media_reset (a turn that added an image), spill, "
            "failover, verified_miss (the engine did not restore the previous prompt's "
            "checkpoint), moved (a fleet's pinned turn sent before the store showed another "
            "gateway had moved it), "
            "restarted (a conversation the client rewrote under the same root, such as Codex's "
            "compaction: not verified).",
            OPS,
            [Query(_rate("flashbox_affinity_total", by="outcome"), "{{outcome}}")],
            stacked=True,
        ),
        graph(
            "Checkpoint hits by conversation kind",
            "Share of pinned turns that hit their checkpoint, per lineage kind: main "
            "conversations, subagents, side requests (titles, summaries); and the share of new "
            "conversations that restored their prompt head's checkpoint.",
            RATIO,
            [
                Query(
                    f"{_rate('flashbox_affinity_total', by='lineage', matchers=HIT)}"
                    f" / {_rate('flashbox_affinity_total', by='lineage', matchers=PINNED)}",
                    "{{lineage}}",
                ),
                Query(
                    f"{_rate('flashbox_affinity_total', matchers=HEAD_HIT)}"
                    f" / {_rate('flashbox_affinity_total', matchers=HEAD_PLACED)}",
                    "prompt heads",
                ),
            ],
        ),
        graph(
            "Checkpoint and prefix-cache outcomes",
            "Share of pinned turns whose checkpoint the engine verifiably missed, and share of "
            "prompt tokens served from the engine's cache.",
            RATIO,
            [
                # No miss series is a ratio of 0, as long as there were pinned turns at all.
                Query(f"({misses} or vector(0)) / {pinned}", "verified-miss ratio"),
                Query(
                    f"{_rate('flashbox_cached_tokens_total')}"
                    f" / {_rate('flashbox_prompt_tokens_total')}",
                    "cached prompt tokens",
                ),
            ],
        ),
        graph(
            "Answer checkpoints",
            "Pinned turns that hit and sent back a previous answer that crossed a track point, "
            "per second: restored (the engine also restored the checkpoint of prompt and answer "
            "together) or lost (only "
            "the prompt's: the answer's text tokenized to other tokens than the engine sampled, "
            "or that checkpoint was evicted first). A lost one re-prefills the answer, at most "
            "a track interval more; it is not a routing miss.",
            OPS,
            [Query(_rate("flashbox_output_checkpoint_total", by="outcome"), "{{outcome}}")],
            stacked=True,
        ),
        graph(
            "Template render p99",
            "Chat-template rendering time in the gateway, by renderer.",
            SECONDS,
            quantiles("flashbox_template_render_seconds", (0.99,), by="renderer"),
        ),
        up_down_timeline(
            "Replica health",
            "Each engine replica as the gateway's health checks see it.",
            Query("max by (replica) (flashbox_replica_up)", "{{replica}}"),
            width=HALF_WIDTH,
            height=8,
        ),
    ]


def _process() -> list[PanelBuilder]:
    job = f'job="{GATEWAY_JOB}"'
    return [
        graph(
            "Gateway CPU",
            "CPU time the gateway process uses per second (1.0 = one core).",
            RATIO,
            [Query(f"rate(process_cpu_seconds_total{{{job}}}[{RATE}])", "{{instance}}")],
            width=serving_media.QUARTER_WIDTH,
        ),
        graph(
            "Gateway memory",
            "Resident memory of the gateway process.",
            BYTES,
            [Query(f"process_resident_memory_bytes{{{job}}}", "{{instance}}")],
            width=serving_media.QUARTER_WIDTH,
        ),
        *serving_media.store_panels(),
    ]


def build() -> Dashboard:
    builder = (
        dashboard.Dashboard(TITLE)
        .uid(UID)
        .description("Time to first token, tokens/s, routing and errors as the gateway sees them.")
        .tags(["flashbox"])
        .refresh("10s")
        .time("now-1h", "now")
        .timezone("browser")
    )
    sections: list[tuple[str, list[PanelBuilder]]] = [
        ("Summary", _summary()),
        ("Latency", _latency()),
        ("Tokens per second", _throughput()),
        ("Traffic and errors", _traffic()),
        ("Routing, checkpoints and replicas", _routing()),
        (serving_media.TITLE, serving_media.panels()),
        ("Gateway process and state", _process()),
    ]
    for title, panels in sections:
        builder = builder.with_row(dashboard.Row(title))
        for panel in panels:
            builder = builder.with_panel(panel)
    return builder.build()
