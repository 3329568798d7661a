"""Read the committed dashboard JSON back: its panels and the PromQL each one runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitoring.grafana.generate import DASHBOARDS_DIR


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    panel_type: str
    unit: str | None
    ref_id: str
    expr: str
    legend: str


def load_dashboards(directory: Path = DASHBOARDS_DIR) -> dict[str, dict[str, Any]]:
    """Dashboard uid -> its JSON document, for every *.json in `directory`."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        out[str(doc["uid"])] = doc
    return out


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's panels that draw something (rows are layout only)."""
    found: list[dict[str, Any]] = []
    for panel in doc.get("panels", []):
        if panel.get("type") == "row":
            found.extend(panel.get("panels", []))  # collapsed rows hold their panels
        else:
            found.append(panel)
    return found


def panel_queries(doc: dict[str, Any]) -> list[PanelQuery]:
    out = []
    for panel in panels(doc):
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        for target in panel.get("targets", []):
            out.append(
                PanelQuery(
                    dashboard=str(doc["uid"]),
                    panel=str(panel.get("title", "")),
                    panel_type=str(panel["type"]),
                    unit=unit,
                    ref_id=str(target.get("refId", "")),
                    expr=str(target["expr"]),
                    legend=str(target.get("legendFormat", "")),
                )
            )
    return out


def find_panel(doc: dict[str, Any], title: str) -> dict[str, Any]:
    for panel in panels(doc):
        if panel.get("title") == title:
            return panel
    raise KeyError(f"no panel titled {title!r} in dashboard {doc.get('uid')!r}")


def variable_names(doc: dict[str, Any]) -> list[str]:
    return [str(var["name"]) for var in doc.get("templating", {}).get("list", [])]
