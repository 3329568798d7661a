"""The "flashbox — engine" dashboard: SGLang's own metrics, under the names it really exports.

SGLang exports `sglang:<name>` (a colon, legal in Prometheus metric names and usable bare in
selectors); its example dashboard queries `sglang_<name>`, which matches nothing.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models.dashboard import Dashboard, VariableRefresh, VariableSort

from monitoring.grafana.panels import (
    COUNT,
    DATASOURCE,
    OPS,
    RATE,
    RATIO,
    SECONDS,
    TOKENS_PER_SECOND,
    PanelBuilder,
    Query,
    graph,
    quantiles,
)

UID = "flashbox-engine"
TITLE = "flashbox — engine"
INSTANCE = 'instance=~"$instance"'


def _gauge(metric: str, legend: str) -> Query:
    return Query(f"sum by (instance) ({metric}{{{INSTANCE}}})", legend)


def _rate(metric: str, legend: str) -> Query:
    return Query(f"sum by (instance) (rate({metric}{{{INSTANCE}}}[{RATE}]))", legend)


def _load() -> list[PanelBuilder]:
    return [
        graph(
            "Running and queued requests",
            "Requests in the running batch and waiting in the engine's queue, per replica.",
            COUNT,
            [
                _gauge("sglang:num_running_reqs", "running {{instance}}"),
                _gauge("sglang:num_queue_reqs", "queued {{instance}}"),
            ],
        ),
        graph(
            "KV-token and recurrent-state usage",
            "Share of the KV token pool in use, and share of the recurrent-state (mamba) pool "
            "that holds the hybrid model's checkpoints.",
            RATIO,
            [
                _gauge("sglang:token_usage", "tokens {{instance}}"),
                _gauge("sglang:mamba_usage", "recurrent state {{instance}}"),
            ],
        ),
    ]


def _throughput() -> list[PanelBuilder]:
    return [
        graph(
            "Generation throughput",
            "Decode tokens per second as the engine reports it.",
            TOKENS_PER_SECOND,
            [_gauge("sglang:gen_throughput", "{{instance}}")],
        ),
        graph(
            "Prompt, cached and generated tokens/s",
            "Token counters of the engine as rates.",
            TOKENS_PER_SECOND,
            [
                _rate("sglang:prompt_tokens_total", "prompt {{instance}}"),
                _rate("sglang:cached_tokens_total", "cached {{instance}}"),
                _rate("sglang:generation_tokens_total", "generated {{instance}}"),
            ],
        ),
        graph(
            "Prefix-cache hit rate",
            "The engine's cache hit rate, and the share of prompt tokens it served from cache.",
            RATIO,
            [
                _gauge("sglang:cache_hit_rate", "hit rate {{instance}}"),
                Query(
                    f"{_rate('sglang:cached_tokens_total', '').expr}"
                    f" / {_rate('sglang:prompt_tokens_total', '').expr}",
                    "cached share {{instance}}",
                ),
            ],
        ),
        # sglang-kt 0.7.2 exports no count of aborted requests (the real server showed it);
        # the gateway's flashbox_upstream_aborts_total on the serving dashboard has them.
        graph(
            "Finished requests/s",
            "Requests the engine finished. Aborts (client gone) are on the serving dashboard.",
            OPS,
            [_rate("sglang:num_requests_total", "finished {{instance}}")],
        ),
    ]


def _latency() -> list[PanelBuilder]:
    return [
        graph(
            "Engine time to first token",
            "Measured inside the engine: excludes the gateway's queue, render and routing.",
            SECONDS,
            quantiles("sglang:time_to_first_token_seconds", matchers=INSTANCE),
        ),
        graph(
            "Engine inter-token latency",
            "Gap between decode steps of one request, inside the engine.",
            SECONDS,
            quantiles("sglang:inter_token_latency_seconds", matchers=INSTANCE),
        ),
        graph(
            "Engine queue time",
            "Time requests wait in the engine's queue before prefill starts.",
            SECONDS,
            quantiles("sglang:queue_time_seconds", (0.5, 0.95), matchers=INSTANCE),
        ),
        graph(
            "Engine end-to-end latency",
            "Request arrival at the engine to its last token.",
            SECONDS,
            quantiles("sglang:e2e_request_latency_seconds", matchers=INSTANCE),
        ),
    ]


def _instance_variable() -> dashboard.QueryVariable:
    return (
        dashboard.QueryVariable("instance")
        .label("Replica")
        .datasource(DATASOURCE)
        .query("label_values(sglang:num_running_reqs, instance)")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def build() -> Dashboard:
    builder = (
        dashboard.Dashboard(TITLE)
        .uid(UID)
        .description("SGLang's own metrics per engine replica: load, throughput, cache, latency.")
        .tags(["flashbox", "sglang"])
        .refresh("10s")
        .time("now-1h", "now")
        .timezone("browser")
        .with_variable(_instance_variable())
    )
    sections: list[tuple[str, list[PanelBuilder]]] = [
        ("Load", _load()),
        ("Throughput and cache", _throughput()),
        ("Latency inside the engine", _latency()),
    ]
    for title, panels in sections:
        builder = builder.with_row(dashboard.Row(title))
        for panel in panels:
            builder = builder.with_panel(panel)
    return builder.build()
