"""Panel builders the flashbox dashboards share: one datasource, one look, one query style."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
)

# The provisioned datasource (provisioning/datasources/prometheus.yml) carries this uid, so the
# dashboards never depend on a datasource name or on Grafana's default.
DATASOURCE_UID = "flashbox-prometheus"
DATASOURCE = DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)

# Grafana widens $__rate_interval to at least four scrape intervals, so a rate always spans
# enough samples whatever the zoom level.
RATE = "$__rate_interval"

# Units the dashboards use (Grafana unit ids); the tests hold panels to this set.
SECONDS = "s"
PER_SECOND = "reqps"
OPS = "ops"
RATIO = "percentunit"
COUNT = "short"
BYTES = "bytes"
TOKENS_PER_SECOND = "suffix: tok/s"
UNITS = frozenset({SECONDS, PER_SECOND, OPS, RATIO, COUNT, BYTES, TOKENS_PER_SECOND})

PanelBuilder = Builder[dashboard_models.Panel]

FULL_WIDTH = 24
HALF_WIDTH = 12
THIRD_WIDTH = 8
PANEL_HEIGHT = 8


@dataclass(frozen=True)
class Query:
    """One PromQL expression and the legend Grafana draws for its series."""

    expr: str
    legend: str


def quantiles(
    histogram: str,
    levels: Sequence[float] = (0.5, 0.95, 0.99),
    *,
    by: str = "",
    matchers: str = "",
    legend_suffix: str = "",
) -> list[Query]:
    """histogram_quantile over a rate of the histogram's buckets, one query per level.

    `by` keeps one more label (one series per value); `matchers` is a `{...}` selector body.
    """
    group = f"le, {by}" if by else "le"
    selector = f"{histogram}_bucket{{{matchers}}}" if matchers else f"{histogram}_bucket"
    out = []
    for level in levels:
        name = f"p{round(level * 100)}"
        legend = f"{name} {{{{{by}}}}}" if by else name
        expr = f"histogram_quantile({level}, sum by ({group}) (rate({selector}[{RATE}])))"
        out.append(Query(expr, legend + legend_suffix))
    return out


def _target(query: Query, ref_id: str, exemplars: bool = False) -> prometheus.Dataquery:
    target = (
        prometheus.Dataquery()
        .expr(query.expr)
        .legend_format(query.legend)
        .ref_id(ref_id)
        .datasource(DATASOURCE)
        .range()
    )
    return target.exemplar(True) if exemplars else target


def _ref_ids(count: int) -> list[str]:
    return [chr(ord("A") + i) for i in range(count)]


def _legend() -> common_builders.VizLegendOptions:
    return (
        common_builders.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.LIST)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
    )


def graph(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int = HALF_WIDTH,
    height: int = PANEL_HEIGHT,
    stacked: bool = False,
    exemplars: bool = False,
) -> timeseries.Panel:
    """A time-series panel; `stacked` draws the series on top of each other (parts of a whole);
    `exemplars` draws the histogram's exemplars too (a traced request's trace id, each a link to
    its trace: the Prometheus datasource's exemplarTraceIdDestinations)."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(0)
        .span(width)
        .height(height)
        .line_width(1)
        .fill_opacity(10)
        .legend(_legend())
        .targets(
            # Exemplars are the histogram's, the same for every quantile: drawn once.
            [
                _target(q, ref, exemplars and ref == "A")
                for q, ref in zip(queries, _ref_ids(len(queries)), strict=True)
            ]
        )
    )
    if stacked:
        panel = panel.stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL))
    return panel


def single_stat(
    title: str,
    description: str,
    unit: str,
    query: Query,
    *,
    width: int = THIRD_WIDTH // 2,
    height: int = PANEL_HEIGHT // 2,
    warn_above: float | None = None,
) -> stat.Panel:
    """A single-number panel; `warn_above` turns it red past that value."""
    # The schema wants a number where Grafana writes null (-Infinity); every stat here is >= 0.
    steps = [Threshold(value=0, color="green")]
    if warn_above is not None:
        steps.append(Threshold(value=warn_above, color="red"))
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(
            dashboard_builders.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(steps)
        )
        .targets([_target(query, "A")])
    )


def up_down_timeline(
    title: str,
    description: str,
    query: Query,
    *,
    width: int = FULL_WIDTH,
    height: int = PANEL_HEIGHT // 2,
) -> statetimeline.Panel:
    """A state timeline for 0/1 health series: green "up", red "down"."""
    mapping = ValueMap(
        options={
            "0": ValueMappingResult(text="down", color="red", index=0),
            "1": ValueMappingResult(text="up", color="green", index=1),
        }
    )
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(COUNT)
        .span(width)
        .height(height)
        .mappings([mapping])
        .show_value(common.VisibilityMode.NEVER)
        .legend(_legend())
        .targets([_target(query, "A")])
    )
