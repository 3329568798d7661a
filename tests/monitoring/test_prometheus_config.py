"""The scrape config and alert rules: promtool's checks and rule unit tests, and their contracts."""

from __future__ import annotations

from monitoring.promql import metric_names
from tests.monitoring.support import (
    PROMETHEUS_DIR,
    SYNTHETIC_NAMES,
    alert_rules,
    debian_tool,
    gateway_sample_names,
    load_yaml,
    run_tool,
    sglang_sample_names,
)
from tests.support.procs import REPO_ROOT

ISSUE_ALERTS = {
    "FlashboxNoHealthyReplica",
    "FlashboxTTFTp95OverSLO",
    "FlashboxCheckpointVerifiedMisses",
    "FlashboxEngineQueueGrowing",
    "FlashboxHigh5xxRate",
}


def test_promtool_accepts_the_config_and_its_rule_files() -> None:
    result = run_tool(
        [debian_tool("promtool"), "check", "config", str(PROMETHEUS_DIR / "prometheus.yml")]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_promtool_accepts_the_rules() -> None:
    result = run_tool(
        [debian_tool("promtool"), "check", "rules", str(PROMETHEUS_DIR / "alerts.yml")]
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rule_unit_tests_pass() -> None:
    result = run_tool(
        [debian_tool("promtool"), "test", "rules", str(PROMETHEUS_DIR / "alerts_test.yml")]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_unit_tested_firing_and_quiet() -> None:
    names = {rule["alert"] for rule in alert_rules()}
    assert names >= ISSUE_ALERTS
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in load_yaml(PROMETHEUS_DIR / "alerts_test.yml")["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    assert fired == names, f"never shown firing: {names - fired}"
    assert quiet == names, f"never shown quiet: {names - quiet}"


def test_alerts_name_only_exported_metrics() -> None:
    known = gateway_sample_names() | sglang_sample_names() | SYNTHETIC_NAMES
    for rule in alert_rules():
        unknown = metric_names(rule["expr"]) - known
        assert not unknown, f"{rule['alert']} queries metrics nobody exports: {unknown}"
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]
        assert rule["annotations"]["description"]


def test_scrape_targets_are_the_compose_services() -> None:
    config = load_yaml(PROMETHEUS_DIR / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"flashbox-gateway", "sglang"}
    assert jobs["flashbox-gateway"]["static_configs"] == [{"targets": ["gateway:8080"]}]
    (dns,) = jobs["sglang"]["dns_sd_configs"]
    assert dns["port"] == 30000
    assert set(dns["names"]) == {"engine", "engine-sim-a", "engine-sim-b"}
    compose_file = REPO_ROOT / "compose.yaml"
    if compose_file.exists():
        services = set(load_yaml(compose_file)["services"])
        assert {"gateway", *dns["names"]} <= services


def test_grafana_datasource_matches_prometheus() -> None:
    from monitoring.grafana.panels import DATASOURCE_UID

    provisioning = REPO_ROOT / "monitoring" / "grafana" / "provisioning"
    (source,) = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert source["uid"] == DATASOURCE_UID
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    scrape_interval = load_yaml(PROMETHEUS_DIR / "prometheus.yml")["global"]["scrape_interval"]
    # $__rate_interval is derived from it: a mismatch makes rates span too few scrapes.
    assert source["jsonData"]["timeInterval"] == scrape_interval
    (provider,) = load_yaml(provisioning / "dashboards" / "flashbox.yml")["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
