"""Draw the dashboards' main panels from a Prometheus' data into one PNG (for the README).

    python -m monitoring.snapshot --prometheus http://127.0.0.1:9090 --minutes 15 \
        --out docs/img/dashboard.png

The panels' queries come from the committed dashboard JSON, so the picture shows what Grafana
would. The monitoring end-to-end test draws one from its own run (see docs/monitoring.md).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from monitoring.grafana.queries import find_panel, load_dashboards
from monitoring.promapi import PrometheusAPI
from monitoring.promql import expand

# (dashboard uid, panel title): the panels a reader looks at first.
MAIN_PANELS: tuple[tuple[str, str], ...] = (
    ("flashbox-serving", "Time to first token"),
    ("flashbox-serving", "TTFT by stage (p95)"),
    ("flashbox-serving", "Decode tokens/s per request"),
    ("flashbox-serving", "Tokens/s, all requests"),
    ("flashbox-serving", "Requests/s by status"),
    ("flashbox-serving", "In flight"),
    ("flashbox-serving", "Affinity outcomes"),
    ("flashbox-engine", "Running and queued requests"),
    ("flashbox-engine", "Engine time to first token"),
)
_AXIS_LABELS = {
    "s": "seconds",
    "reqps": "requests/s",
    "ops": "per second",
    "percentunit": "share",
    "short": "count",
    "bytes": "bytes",
    "suffix: tok/s": "tokens/s",
}
_LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
COLUMNS = 3


@dataclass(frozen=True)
class Line:
    label: str
    times: list[float]
    values: list[float]


@dataclass(frozen=True)
class PanelData:
    title: str
    unit: str
    lines: list[Line]


def default_variables(rate_window: str) -> dict[str, str]:
    """Values for the dashboards' Grafana variables, when no Grafana is there to fill them."""
    return {
        "__rate_interval": rate_window,
        "__interval": rate_window,
        "__range": rate_window,
        "instance": ".*",
    }


def _legend(template: str, labels: Mapping[str, str], fallback: str) -> str:
    text = _LEGEND_LABEL.sub(lambda m: labels.get(m.group(1), ""), template).strip()
    return text or fallback


def fetch(
    prom: PrometheusAPI,
    start: float,
    end: float,
    step: float,
    variables: Mapping[str, str],
    wanted: Sequence[tuple[str, str]] = MAIN_PANELS,
    dashboards: Mapping[str, dict[str, Any]] | None = None,
) -> list[PanelData]:
    docs = dashboards if dashboards is not None else load_dashboards()
    out = []
    for uid, title in wanted:
        panel = find_panel(docs[uid], title)
        unit = str(panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short"))
        lines = []
        for target in panel.get("targets", []):
            expr = expand(str(target["expr"]), variables)
            for series in prom.query_range(expr, start, end, step):
                points = series.finite()
                if not points:
                    continue
                label = _legend(str(target.get("legendFormat", "")), series.labels, expr)
                lines.append(Line(label, [t - start for t, _ in points], [v for _, v in points]))
        out.append(PanelData(title, unit, lines))
    return out


def draw(panels: Sequence[PanelData], out: Path, heading: str) -> None:
    rows = -(-len(panels) // COLUMNS)
    figure = Figure(figsize=(6 * COLUMNS, 3.6 * rows), layout="constrained")
    figure.suptitle(heading)
    axes = figure.subplots(rows, COLUMNS, squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index >= len(panels):
            ax.set_axis_off()
            continue
        panel = panels[index]
        ax.set_title(panel.title, fontsize=10)
        ax.set_ylabel(_AXIS_LABELS.get(panel.unit, panel.unit), fontsize=8)
        ax.set_xlabel("seconds into the run", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        for line in panel.lines:
            ax.plot(line.times, line.values, label=line.label, linewidth=1.2)
        if panel.lines:
            ax.legend(fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=90)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090", help="Prometheus URL")
    parser.add_argument("--minutes", type=float, default=15.0, help="how far back to draw")
    parser.add_argument("--step", type=float, default=5.0, help="seconds between points")
    parser.add_argument("--rate-window", default="1m", help="stands in for $__rate_interval")
    parser.add_argument("--out", type=Path, default=Path("docs/img/dashboard.png"))
    args = parser.parse_args(argv)
    end = time.time()
    start = end - args.minutes * 60
    with PrometheusAPI(args.prometheus) as prom:
        data = fetch(prom, start, end, args.step, default_variables(args.rate_window))
    draw(data, args.out, f"flashbox dashboards, last {args.minutes:g} minutes")
    empty = [panel.title for panel in data if not panel.lines]
    print(f"wrote {args.out}" + (f"; no data for: {', '.join(empty)}" if empty else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
