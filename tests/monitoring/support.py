"""What the monitoring tests share: paths, the metric names each side exports, the Debian tools."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gateway.observability.metrics import Metrics
from monitoring import sglang_metrics
from tests.support.procs import REPO_ROOT

PROMETHEUS_DIR = REPO_ROOT / "monitoring" / "prometheus"
GRAFANA_DIR = REPO_ROOT / "monitoring" / "grafana"
# Series Prometheus adds to every target itself.
SYNTHETIC_NAMES = frozenset({"up"})


def debian_tool(name: str) -> str:
    """Path of a tool from Debian's prometheus package; skip locally, fail on CI, when missing."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not installed (`make debs` installs Debian's prometheus package)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def run_tool(argv: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO_ROOT,
    )


def registry_sample_names(registry: CollectorRegistry) -> frozenset[str]:
    """Every series name a registry can expose, whether or not a labelled child exists yet."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
        "info": ("_info",),
    }
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return frozenset(names)


def gateway_sample_names() -> frozenset[str]:
    return registry_sample_names(Metrics().registry)


def sglang_sample_names() -> frozenset[str]:
    return sglang_metrics.sample_names()


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def alert_rules() -> list[dict[str, Any]]:
    doc = load_yaml(PROMETHEUS_DIR / "alerts.yml")
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]
