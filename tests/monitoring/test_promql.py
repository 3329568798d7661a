"""The PromQL scanner the dashboard and alert checks rely on."""

from __future__ import annotations

import pytest

from monitoring.promql import Selector, expand, metric_names, selectors


def test_quantile_query_names_only_the_bucket_series() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le, stage) "
        "(rate(flashbox_ttft_stage_seconds_bucket[$__rate_interval])))"
    )
    assert selectors(expr) == [Selector("flashbox_ttft_stage_seconds_bucket")]


def test_colon_names_and_matchers_are_kept() -> None:
    expr = 'sum by (instance) (sglang:num_running_reqs{instance=~"$instance"})'
    assert selectors(expr) == [Selector("sglang:num_running_reqs", '{instance=~"$instance"}')]


def test_binary_operators_keywords_and_modifiers_are_not_metrics() -> None:
    expr = (
        "min_over_time(sglang:num_queue_reqs[10m]) > 0 and deriv(sglang:num_queue_reqs[10m]) > 0"
        " unless on (instance) up offset 5m == bool 1"
    )
    assert metric_names(expr) == {"sglang:num_queue_reqs", "up"}


def test_trailing_by_clause_and_label_values_in_strings() -> None:
    expr = 'sum(rate(flashbox_requests_total{code=~"5..", model="by"}[5m])) by (code) / 2e3'
    assert selectors(expr) == [Selector("flashbox_requests_total", '{code=~"5..", model="by"}')]


def test_name_matcher_selector() -> None:
    expr = 'rate({__name__="sglang:prompt_tokens_total", job="sglang"}[1m])'
    (selector,) = selectors(expr)
    assert selector.name == "sglang:prompt_tokens_total"
    assert str(selector) == '{__name__="sglang:prompt_tokens_total", job="sglang"}'


def test_repeats_are_listed_once() -> None:
    expr = "sum(rate(a_total[1m])) / sum(rate(a_total[1m])) - sum(rate(b_total[1m]))"
    assert [s.name for s in selectors(expr)] == ["a_total", "b_total"]


def test_expand_replaces_every_grafana_variable_form() -> None:
    expr = 'rate(x{instance=~"${instance:regex}"}[$__rate_interval]) + y{i=~"$instance"}'
    assert expand(expr, {"__rate_interval": "30s", "instance": ".*"}) == (
        'rate(x{instance=~".*"}[30s]) + y{i=~".*"}'
    )


def test_expand_refuses_an_unknown_variable() -> None:
    with pytest.raises(KeyError):
        expand("rate(x[$__interval])", {"__rate_interval": "30s"})
