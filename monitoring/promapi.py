"""A small typed client for Prometheus' HTTP API (instant and range queries, targets, rules)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import httpx


class PrometheusQueryError(Exception):
    """Prometheus refused or failed a query; the message is Prometheus' own."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)

    def finite(self) -> list[tuple[float, float]]:
        """Points with a number (histogram_quantile yields NaN where no request fell)."""
        return [(t, v) for t, v in self.points if math.isfinite(v)]


class PrometheusAPI:
    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self._client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(self, path: str, params: dict[str, str]) -> Any:
        # POST with a form body, as Grafana does: long expressions stay out of the URL.
        response = self._client.post(path, data=params)
        try:
            body = response.json()
        except ValueError as exc:
            raise PrometheusQueryError(f"{path}: HTTP {response.status_code}") from exc
        if body.get("status") != "success":
            raise PrometheusQueryError(
                f"{body.get('errorType', 'error')}: {body.get('error', response.text)}"
            )
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[Sample]:
        """Instant query; a scalar result comes back as one sample without labels."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._post("/api/v1/query", params)
        kind, result = data["resultType"], data["result"]
        if kind == "scalar":
            return [Sample({}, float(result[1]))]
        if kind != "vector":
            raise PrometheusQueryError(f"expected an instant vector, got {kind}")
        return [Sample(dict(item["metric"]), float(item["value"][1])) for item in result]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
        data = self._post("/api/v1/query_range", params)
        return [
            Series(dict(item["metric"]), [(float(t), float(v)) for t, v in item["values"]])
            for item in data["result"]
        ]

    def targets(self) -> list[dict[str, Any]]:
        response = self._client.get("/api/v1/targets", params={"state": "active"})
        response.raise_for_status()
        active: list[dict[str, Any]] = response.json()["data"]["activeTargets"]
        return active

    def rules(self) -> list[dict[str, Any]]:
        response = self._client.get("/api/v1/rules")
        response.raise_for_status()
        rules: list[dict[str, Any]] = []
        for group in response.json()["data"]["groups"]:
            rules.extend(group["rules"])
        return rules
