"""End to end against a real Prometheus: load through the gateway, then every panel and alert query.

Two simulators and the gateway run on loopback, Debian's Prometheus scrapes them every second
with the committed alert rules loaded, the openai client drives multi-turn streaming sessions,
and then every dashboard query and alert expression is evaluated through Prometheus' HTTP API.
Set FLASHBOX_SNAPSHOT_OUT=docs/img/dashboard.png to also refresh the README's picture.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitoring import sglang_metrics, snapshot
from monitoring.grafana.queries import find_panel, load_dashboards, panel_queries
from monitoring.promapi import PrometheusAPI, PrometheusQueryError
from monitoring.promql import expand, selectors
from tests.monitoring.stack import (
    SCRAPE_INTERVAL_S,
    Load,
    LoadResult,
    drive,
    start_prometheus,
    wait_for_scrapes,
    wait_for_targets,
    write_prometheus_config,
)
from tests.monitoring.support import alert_rules, debian_tool, run_tool
from tests.support.procs import REPO_ROOT, Proc, start_gateway, start_sim

# Simulated hardware time x 0.05: a cold prefill's ~6.4 s floor becomes ~0.32 s, so TTFTs land in
# the sub-second-to-seconds buckets and the load takes seconds, not minutes.
TIME_SCALE = 0.05
LOAD = Load(sessions=6, turns=4, max_tokens=48, misbehave=True)
GATEWAY_ENV = {
    # One slot per session: the first turns and one more request arrive together, so one of
    # them is refused (429); a refused turn is retried, later turns fit.
    "FLASHBOX_ADMISSION__MAX_IN_FLIGHT": str(LOAD.sessions),
    "FLASHBOX_ADMISSION__MAX_QUEUE": "0",
    # Lets a request ask the simulator for a fault or a given tool call (custom_params.sim).
    "FLASHBOX_UPSTREAM__FORWARD_CUSTOM_PARAMS": "true",
    # The load's sessions share a short system prompt: counted as a prompt head, so new
    # sessions are placed where its checkpoint is and the head panels have data.
    "FLASHBOX_ROUTING__MIN_HEAD_TOKENS": "16",
    # Each simulator runs RUNNING requests at a time, fewer than the sessions' first turns on
    # it: one waits in the gateway's fair queue, and the next one is refused (429, retried),
    # so the fair-queue panels have data.
    "FLASHBOX_FAIRNESS__MAX_QUEUED_PER_KEY": "1",
}
RUNNING = 2
HEADING = (
    f"flashbox dashboards during the monitoring test: simulated engine at x{TIME_SCALE:g} time "
    f"(seconds {1 / TIME_SCALE:g}x shorter, tokens/s {1 / TIME_SCALE:g}x higher than the box)"
)
# What Grafana substitutes for $__rate_interval at this scrape interval (4 scrapes).
GRAPH_RATE_WINDOW = f"{4 * SCRAPE_INTERVAL_S:g}s"

# Selectors a healthy run may leave empty, and why. The metric itself must still be exported.
VERIFIED_MISSES = 'flashbox_affinity_total{outcome="verified_miss"}'
PINNED_TURNS = 'flashbox_affinity_total{outcome=~"hit|verified_miss"}'
MAY_BE_EMPTY = {
    VERIFIED_MISSES: "only exists once the engine missed a checkpoint a pin promised",
    PINNED_TURNS: "only exists once the picker pins sessions (checkpoint-aware affinity)",
}

# Histograms a healthy run may leave without observations (their quantile is NaN), and why.
NO_OBSERVATIONS = {
    "flashbox_media_fetch_seconds_bucket": "image URLs are only fetched with media.remote enabled",
}


@dataclass(frozen=True)
class Run:
    prom: PrometheusAPI
    prom_url: str
    gateway: Proc
    sims: tuple[Proc, ...]
    load: LoadResult
    start: float
    evaluated_at: float
    window: str

    def variables(self, rate_window: str | None = None) -> dict[str, str]:
        return snapshot.default_variables(rate_window or self.window)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    debian_tool("prometheus")
    workdir = tmp_path_factory.mktemp("prometheus")
    with contextlib.ExitStack() as stack:
        sims = []
        for name in ("sim-a", "sim-b"):
            sim = start_sim(
                "--max-running-requests", str(RUNNING), name=name, time_scale=TIME_SCALE
            )
            stack.callback(sim.stop)
            sims.append(sim)
        gateway = start_gateway([sim.url for sim in sims], env=GATEWAY_ENV)
        stack.callback(gateway.stop)
        config = workdir / "prometheus.yml"
        write_prometheus_config(
            config, f"127.0.0.1:{gateway.port}", [f"127.0.0.1:{sim.port}" for sim in sims]
        )
        prometheus = start_prometheus(config, workdir)
        stack.callback(prometheus.stop)
        prom = stack.enter_context(PrometheusAPI(prometheus.url))
        wait_for_targets(prom, count=1 + len(sims))
        # One request first, so the labelled series exist before the measured load: a rate
        # ignores whatever a series counted before its first scrape.
        drive(gateway.url, Load(sessions=1, turns=1, max_tokens=8))
        wait_for_scrapes(2)
        start = time.time()
        result = drive(gateway.url, LOAD)
        wait_for_scrapes(3)
        evaluated_at = time.time()
        window = f"{math.ceil(evaluated_at - start) + 2}s"
        yield Run(prom, prometheus.url, gateway, tuple(sims), result, start, evaluated_at, window)


def _has_data(run: Run, expr: str) -> bool:
    samples = run.prom.query(expr, at=run.evaluated_at)
    return any(math.isfinite(sample.value) for sample in samples)


def _exported_families(run: Run) -> set[str]:
    text = httpx.get(run.gateway.url + "/metrics", timeout=5.0).text
    return {family.name for family in text_string_to_metric_families(text)}


def _family(sample_name: str) -> str:
    for suffix in ("_total", "_bucket", "_count", "_sum", "_created"):
        if sample_name.endswith(suffix):
            return sample_name.removesuffix(suffix)
    return sample_name


def test_the_load_went_through(run: Run) -> None:
    assert run.load.completed == LOAD.sessions * LOAD.turns
    assert len(run.load.ttfts) == run.load.completed
    assert run.load.invalid_rejected == 1
    assert run.load.engine_failed == 1
    assert run.load.admission_rejected >= 1
    assert run.load.tool_calls_offered == 1
    assert run.load.images_sent == 1
    assert run.load.head_reuses == 1


def _empty_selectors_unexplained(run: Run, expr: str, exported: set[str]) -> list[str]:
    """Why `expr` has no data, if not for a selector in MAY_BE_EMPTY; [] when that explains it."""
    empty = [s for s in selectors(expr) if not _has_data(run, f"count({s})")]
    if not empty:
        if any(s.name in NO_OBSERVATIONS for s in selectors(expr)):
            return []
        return [f"every selector has data, yet {expr} has none"]
    pinned = _has_data(run, 'count(flashbox_affinity_total{outcome="hit"})')
    unexplained = []
    for selector in empty:
        allowed = str(selector) in MAY_BE_EMPTY and not (str(selector) == PINNED_TURNS and pinned)
        if not allowed or _family(selector.name) not in exported:
            unexplained.append(f"{selector} selects nothing")
    return unexplained


def test_every_dashboard_query_returns_data(run: Run) -> None:
    exported = _exported_families(run)
    failures = []
    checked = 0
    for doc in load_dashboards().values():
        for query in panel_queries(doc):
            expr = expand(query.expr, run.variables())
            checked += 1
            if _has_data(run, expr):
                continue
            for why in _empty_selectors_unexplained(run, expr, exported):
                failures.append(f"{query.dashboard} / {query.panel} [{query.ref_id}]: {why}")
    assert checked > 40
    assert not failures, "queries without data:\n" + "\n".join(failures)


def test_every_alert_expression_evaluates_on_real_series(run: Run) -> None:
    exported = _exported_families(run)
    for rule in alert_rules():
        # Raises on a query Prometheus rejects; under healthy load most return nothing, so
        # each series an alert looks at must exist (or be one that only failures create).
        run.prom.query(rule["expr"], at=run.evaluated_at)
        for selector in selectors(rule["expr"]):
            if _has_data(run, f"count({selector})"):
                continue
            assert not _empty_selectors_unexplained(run, str(selector), exported), rule["alert"]


def test_prometheus_evaluates_the_rules_without_error_and_nothing_fires(run: Run) -> None:
    rules = {rule["name"]: rule for rule in run.prom.rules()}
    assert set(rules) == {rule["alert"] for rule in alert_rules()}
    for name, rule in rules.items():
        assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"
        assert rule["state"] != "firing", f"{name} fires under healthy load"


def test_ttft_p50_panel_agrees_with_the_client_within_one_bucket(run: Run) -> None:
    panel = find_panel(load_dashboards()["flashbox-serving"], "Time to first token")
    (target,) = [t for t in panel["targets"] if t["legendFormat"] == "p50"]
    (sample,) = run.prom.query(expand(target["expr"], run.variables()), at=run.evaluated_at)
    bounds = sorted(
        float(s.labels["le"])
        for s in run.prom.query("count by (le) (flashbox_ttft_seconds_bucket)", run.evaluated_at)
    )
    client = run.load.median_ttft()
    panel_bucket = bisect.bisect_left(bounds, sample.value)
    client_bucket = bisect.bisect_left(bounds, client)
    assert abs(panel_bucket - client_bucket) <= 1, (
        f"panel p50 {sample.value:.3f}s vs client median {client:.3f}s (buckets {bounds})"
    )


def test_gateway_metrics_pass_promtool(run: Run) -> None:
    text = httpx.get(run.gateway.url + "/metrics", timeout=5.0).content
    result = run_tool([debian_tool("promtool"), "check", "metrics"], stdin=text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert b"flashbox_ttft_seconds_bucket" in text


def test_simulators_export_sglangs_metric_names(run: Run) -> None:
    for sim in run.sims:
        text = httpx.get(sim.url + "/metrics", timeout=5.0).text
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        names = {s.name for s in samples}
        missing = sglang_metrics.sample_names() - names
        assert not missing, f"{sim.url} does not export {missing}"
        assert all("model_name" in s.labels for s in samples if s.name.startswith("sglang:"))
    # Prometheus takes the colon names bare in selectors, as the engine dashboard writes them.
    bare = run.prom.query("sglang:num_running_reqs", at=run.evaluated_at)
    quoted = run.prom.query('{__name__="sglang:num_running_reqs"}', at=run.evaluated_at)
    assert len(bare) == len(quoted) == len(run.sims)


def test_a_bad_query_is_an_error_not_an_empty_result(run: Run) -> None:
    # What makes "evaluates without error" above mean something.
    with pytest.raises(PrometheusQueryError, match="parse"):
        run.prom.query("sum(rate(flashbox_requests_total[5m])", at=run.evaluated_at)


def test_snapshot_draws_the_main_panels(run: Run, tmp_path: Path) -> None:
    data = snapshot.fetch(
        run.prom,
        run.start - 2 * SCRAPE_INTERVAL_S,
        run.evaluated_at,
        SCRAPE_INTERVAL_S,
        run.variables(GRAPH_RATE_WINDOW),
    )
    assert [panel.title for panel in data] == [title for _, title in snapshot.MAIN_PANELS]
    for panel in data:
        assert any(len(line.values) >= 2 for line in panel.lines), f"{panel.title}: no series"
    out = tmp_path / "dashboard.png"
    snapshot.draw(data, out, HEADING)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 20_000
    target = os.environ.get("FLASHBOX_SNAPSHOT_OUT")
    if target:
        shutil.copyfile(out, REPO_ROOT / target)


def test_snapshot_command_draws_from_a_running_prometheus(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "cli.png"
    argv = ["--prometheus", run.prom_url, "--minutes", "1", "--step", "1", "--out", str(out)]
    assert snapshot.main(argv) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
