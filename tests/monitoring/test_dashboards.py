"""The generated dashboards: committed JSON current, schema-valid, and querying real metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from monitoring.grafana import generate
from monitoring.grafana.panels import DATASOURCE_UID, UNITS
from monitoring.grafana.queries import load_dashboards, panel_queries, panels, variable_names
from monitoring.promql import metric_names
from tests.monitoring.support import (
    SYNTHETIC_NAMES,
    gateway_sample_names,
    sglang_sample_names,
)
from tests.support.reference import reference_file

PANEL_TYPES = {"timeseries", "stat", "state-timeline"}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range"}


@pytest.fixture(scope="module")
def dashboards() -> dict[str, dict[str, Any]]:
    docs = load_dashboards()
    assert set(docs) == {"flashbox-serving", "flashbox-engine"}
    return docs


def test_committed_json_is_what_the_code_generates(tmp_path: Path) -> None:
    for name, text in generate.rendered().items():
        committed = (generate.DASHBOARDS_DIR / name).read_text(encoding="utf-8")
        assert committed == text, f"{name} is stale: run `make dashboards`"
    assert generate.main(["--check"]) == 0
    assert generate.main(["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(generate.BUILDERS)
    stale = tmp_path / next(iter(generate.BUILDERS))
    stale.write_text(stale.read_text(encoding="utf-8").replace("TTFT", "ttft"), encoding="utf-8")
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1


def test_dashboards_validate_against_grafanas_schema(dashboards: dict[str, dict[str, Any]]) -> None:
    schema_path = reference_file("grafana", "dashboard.schema.json")
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    for uid, doc in dashboards.items():
        errors = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(doc)]
        assert not errors, f"{uid}: {errors[:5]}"
        assert doc["schemaVersion"] == 41  # Grafana 11.6


def test_panels_have_known_types_units_and_the_fixed_datasource(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    for uid, doc in dashboards.items():
        ids = [panel["id"] for panel in doc["panels"]]
        assert len(ids) == len(set(ids)), f"{uid}: duplicate panel ids"
        for panel in panels(doc):
            where = f"{uid} / {panel.get('title')}"
            assert panel["type"] in PANEL_TYPES, where
            assert panel["title"], where
            assert panel["description"], where
            assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}, where
            assert panel["fieldConfig"]["defaults"]["unit"] in UNITS, where
            assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, where
            ref_ids = [target["refId"] for target in panel["targets"]]
            assert ref_ids, where
            assert len(ref_ids) == len(set(ref_ids)), where
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == DATASOURCE_UID, where
                assert target["expr"].strip(), where


def test_units_fit_what_the_panels_show(dashboards: dict[str, dict[str, Any]]) -> None:
    for doc in dashboards.values():
        for query in panel_queries(doc):
            where = f"{query.dashboard} / {query.panel}: {query.expr}"
            if query.expr.startswith("histogram_quantile") and "_seconds_bucket" in query.expr:
                assert query.unit == "s", where
            if "tokens_per_second" in query.expr or "gen_throughput" in query.expr:
                assert query.unit == "suffix: tok/s", where
            if query.panel_type == "state-timeline":
                assert "replica_up" in query.expr, where


def test_serving_dashboard_has_the_panels_users_watch(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    doc = dashboards["flashbox-serving"]
    assert doc["title"] == "flashbox — serving"
    queries = panel_queries(doc)
    legends = {(q.panel, q.legend) for q in queries}
    assert {("Time to first token", p) for p in ("p50", "p95", "p99")} <= legends
    names = set().union(*(metric_names(q.expr) for q in queries))
    wanted = {
        "flashbox_ttft_seconds_bucket",
        "flashbox_ttft_stage_seconds_bucket",
        "flashbox_decode_tokens_per_second_bucket",
        "flashbox_prefill_tokens_per_second_bucket",
        "flashbox_e2e_latency_seconds_bucket",
        "flashbox_requests_in_flight",
        "flashbox_requests_total",
        "flashbox_affinity_total",
        "flashbox_template_render_seconds_bucket",
        "flashbox_replica_up",
    }
    assert wanted <= names, wanted - names
    render = [q for q in queries if "flashbox_template_render_seconds_bucket" in q.expr]
    assert render
    assert all(q.expr.startswith("histogram_quantile(0.99,") for q in render)


def test_serving_dashboard_splits_requests_ttft_and_errors_by_api(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    # The metrics whose series carry the face a request came through (openai, anthropic, ...).
    queries = panel_queries(dashboards["flashbox-serving"])
    by_api = [q for q in queries if re.search(r"\bby \([^)]*\bapi\b", q.expr)]
    names = set().union(*(metric_names(q.expr) for q in by_api))
    assert names == {
        "flashbox_requests_total",
        "flashbox_ttft_seconds_bucket",
        "flashbox_errors_total",
    }
    assert all("{{api}}" in q.legend for q in by_api)
    ttft = [q for q in by_api if "flashbox_ttft_seconds_bucket" in q.expr]
    assert [q.legend for q in ttft] == ["p50 {{api}}", "p95 {{api}}"]
    assert all("sum by (le, api) (rate(" in q.expr for q in ttft)
    # The totals over every API stay: the summary, TTFT p50/p95/p99 and the alerts read them.
    totals = [q for q in queries if q.panel == "Time to first token"]
    assert all("sum by (le) (rate(" in q.expr for q in totals)


def test_engine_dashboard_uses_sglangs_colon_names(dashboards: dict[str, dict[str, Any]]) -> None:
    doc = dashboards["flashbox-engine"]
    assert doc["title"] == "flashbox — engine"
    queries = panel_queries(doc)
    for query in queries:
        # SGLang's own example dashboard queries sglang_<name>, which matches nothing.
        assert not re.search(r"\bsglang_", query.expr), query.expr
    names = set().union(*(metric_names(q.expr) for q in queries))
    wanted = {
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:gen_throughput",
        "sglang:cache_hit_rate",
        "sglang:mamba_usage",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_bucket",
    }
    assert wanted <= names, wanted - names


def test_every_queried_metric_is_exported(dashboards: dict[str, dict[str, Any]]) -> None:
    exported = {
        "flashbox-serving": gateway_sample_names() | SYNTHETIC_NAMES,
        "flashbox-engine": sglang_sample_names(),
    }
    for uid, doc in dashboards.items():
        for query in panel_queries(doc):
            names = metric_names(query.expr)
            assert names, f"{uid} / {query.panel}: no metric found in {query.expr}"
            unknown = names - exported[uid]
            assert not unknown, f"{uid} / {query.panel}: nobody exports {unknown}"


def test_every_variable_a_query_uses_is_defined(dashboards: dict[str, dict[str, Any]]) -> None:
    for uid, doc in dashboards.items():
        defined = set(variable_names(doc)) | GRAFANA_BUILTINS
        for query in panel_queries(doc):
            used = {
                m.group(1) or m.group(2) for m in re.finditer(r"\$\{?(\w+)\}?|\$(\w+)", query.expr)
            }
            assert used <= defined, f"{uid} / {query.panel}: undefined {used - defined}"
