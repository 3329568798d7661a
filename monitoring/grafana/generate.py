"""Write the dashboards' JSON from code: `python -m monitoring.grafana.generate [--check]`.

The JSON under monitoring/grafana/dashboards/ is committed (Grafana provisions it as is) and a
test holds it equal to what this module renders, so edit the code, not the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard, Panel, RowPanel

from monitoring.grafana import engine, serving

DASHBOARDS_DIR = Path(__file__).resolve().parent / "dashboards"
BUILDERS: dict[str, Callable[[], Dashboard]] = {
    f"{serving.UID}.json": serving.build,
    f"{engine.UID}.json": engine.build,
}


def _number_panels(dash: Dashboard) -> Dashboard:
    # Stable ids in order of appearance, so a regenerated file only changes where the code did.
    panels: list[Panel | RowPanel] = list(dash.panels or [])
    for number, panel in enumerate(panels, start=1):
        panel.id_val = number
    return dash


def render(dash: Dashboard) -> str:
    text = json.dumps(
        _number_panels(dash), cls=JSONEncoder, indent=2, sort_keys=True, ensure_ascii=False
    )
    return text + "\n"


def rendered() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {name: render(build()) for name, build in BUILDERS.items()}


def as_json(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DASHBOARDS_DIR, help="directory to write to")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file differs"
    )
    args = parser.parse_args(argv)
    stale = []
    for name, text in rendered().items():
        path: Path = args.out / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    verb = "differ" if args.check else "written"
    print(f"{len(stale)} dashboard(s) {verb}: {', '.join(stale) or '-'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
