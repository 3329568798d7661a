"""deploy/k8s: every overlay renders, every object passes the Kubernetes schemas, and the manifests
agree with compose.yaml, the engine profile and the gateway's settings.

Rendering needs kustomize v5, standalone or inside kubectl (1.27 and newer); without it the
rendering tests skip and say why. The overlays read a secrets.env that is never committed, so the
tests render a copy of the tree holding one made from secrets.env.example.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from gateway.app import create_app
from gateway.settings import Settings
from tests.deploy.manifests import (
    K8S,
    SECRETS_EXAMPLE,
    VARIANTS,
    Obj,
    container_of,
    env_of,
    matches,
    mounted_configmap,
    of_kind,
    one,
    pod_spec,
    port_names,
    quantity_bytes,
    seconds,
    selected,
    settings_env_names,
    window_s,
    workloads,
)
from tests.support.procs import REPO_ROOT

# The oldest Kubernetes the manifests are checked against (PodDisruptionBudget's
# unhealthyPodEvictionPolicy is on by default from 1.27), and the newest schemas bundled.
KUBERNETES_VERSIONS = ("1.29", kubernetes_validate.latest_version())
# Kinds of custom resources: no bundled schema, checked structurally below instead.
CRD_GROUPS = ("monitoring.coreos.com/",)
# SGLang's /health waits this long for the scheduler before answering 503 (FACTS.md section 5).
SGLANG_HEALTH_WAIT_S = 20
# Seconds between the gateway's last clean exit and the kubelet's SIGKILL.
GATEWAY_STOP_MARGIN_S = 5
# `kubectl apply` records the whole object in an annotation, which is capped at 256 KiB.
APPLY_ANNOTATION_BYTES = 256 * 1024
# FLASHBOX_CONFIG is read by the settings sources, not a settings field.
GATEWAY_ENV_OUTSIDE_FIELDS = {"FLASHBOX_CONFIG"}

# Compose names them on the gateway and engine; kustomize adds them with components/tracing.
TRACING_VARIABLES = {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"}


def _documented_secrets() -> dict[str, str]:
    """KEY -> value for each (possibly commented-out) KEY=value line of the example."""
    pattern = re.compile(r"^#?\s*(FLASHBOX_[A-Z0-9_]+)=(.*)$", flags=re.M)
    return dict(pattern.findall(SECRETS_EXAMPLE.read_text()))


# ------------------------------------------------------------------ schemas and wiring


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_object_passes_the_kubernetes_schemas(
    renders: dict[str, list[Obj]], variant: str
) -> None:
    objs = renders[variant]
    assert {"Namespace", "StatefulSet", "Deployment", "Service", "ConfigMap", "Secret"} <= {
        o["kind"] for o in objs
    }
    errors = []
    for obj in objs:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] != "Namespace":
            assert obj["metadata"].get("namespace") == "flashbox", name
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except (
                kubernetes_validate.ValidationError,
                kubernetes_validate.SchemaNotFoundError,
            ) as e:
                errors.append(f"{name} (Kubernetes {version}): {e.message}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_selectors_and_ports_find_their_pods(renders: dict[str, list[Obj]], variant: str) -> None:
    objs = renders[variant]
    for workload in workloads(objs):
        selector = workload["spec"]["selector"]["matchLabels"]
        assert matches(selector, workload["spec"]["template"]["metadata"]["labels"])
        assert selected(objs, selector) == [workload], "selectors must not overlap"
    for service in of_kind(objs, "Service"):
        [target] = selected(objs, service["spec"]["selector"])
        names = port_names(container_of(target))
        for port in service["spec"]["ports"]:
            assert names[port["targetPort"]] == port["port"], service["metadata"]["name"]
    for budget in of_kind(objs, "PodDisruptionBudget"):
        assert selected(objs, budget["spec"]["selector"]["matchLabels"])
    for policy in of_kind(objs, "NetworkPolicy"):
        [target] = selected(objs, policy["spec"]["podSelector"]["matchLabels"])
        for rule in policy["spec"]["ingress"]:
            for peer in rule["from"]:
                assert selected(objs, peer["podSelector"]["matchLabels"])
            for port in rule["ports"]:
                assert port["port"] in port_names(container_of(target))
    for statefulset in of_kind(objs, "StatefulSet"):
        governing = one(objs, "Service", statefulset["spec"]["serviceName"])
        assert governing["spec"]["clusterIP"] == "None"
        assert selected(objs, governing["spec"]["selector"]) == [statefulset]


def test_configmaps_are_the_committed_files(renders: dict[str, list[Obj]]) -> None:
    objs = renders["single-node"]
    gateway = one(objs, "Deployment", "gateway")
    config = mounted_configmap(objs, gateway, "/etc/flashbox")
    assert config["data"] == {"gateway.yaml": (REPO_ROOT / "config" / "gateway.yaml").read_text()}

    engine = one(objs, "StatefulSet", "engine")
    profiles = mounted_configmap(objs, engine, "/opt/flashbox/config/engine")
    committed = {p.name: p.read_text() for p in (REPO_ROOT / "config" / "engine").glob("*.yaml")}
    assert profiles["data"] == committed, "config/kustomization.yaml must list every profile"

    dashboards = {
        key: cm
        for cm in of_kind(objs, "ConfigMap")
        if cm["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
        for key in cm["data"]
    }
    directory = REPO_ROOT / "monitoring" / "grafana" / "dashboards"
    committed = {p.name: p.read_text() for p in directory.glob("*.json")}
    assert set(dashboards) == set(committed), "monitoring/grafana/kustomization.yaml lists them"
    for key, cm in dashboards.items():
        assert cm["data"] == {key: committed[key]}, "one dashboard per ConfigMap"
        # A stable name: a hash suffix would leave old copies for the sidecar to load too.
        assert cm["metadata"]["name"] == "flashbox-dashboard-" + key.removesuffix(
            ".json"
        ).removeprefix("flashbox-")
        assert len(json.dumps(cm)) < APPLY_ANNOTATION_BYTES, key


# ------------------------------------------------------------------ the engine


def test_engine_matches_compose_and_its_profile(
    renders: dict[str, list[Obj]], compose_gpu: dict[str, Any]
) -> None:
    objs = renders["single-node"]
    statefulset = one(objs, "StatefulSet", "engine")
    pod, container = pod_spec(statefulset), container_of(statefulset)
    compose = compose_gpu["engine"]

    assert container["image"] == compose["image"]
    # The image's entrypoint (the launcher) with compose's arguments.
    assert "command" not in container
    assert container["args"] == compose["command"]
    # The tracing variables reach the pods through components/tracing (envFrom its ConfigMap).
    assert set(env_of(container)) == set(compose.get("environment", {})) - TRACING_VARIABLES
    assert pod["terminationGracePeriodSeconds"] == seconds(compose["stop_grace_period"])
    # compose's `init: true`: the pause process is PID 1 and reaps.
    assert compose["init"] is True
    assert pod["shareProcessNamespace"] is True
    assert set(compose["cap_add"]) <= set(container["securityContext"]["capabilities"]["add"])

    profile_path = Path(container["args"][container["args"].index("--profile") + 1])
    profiles = mounted_configmap(objs, statefulset, str(profile_path.parent))
    profile = yaml.safe_load(profiles["data"][profile_path.name])

    [compose_port] = compose["ports"]
    assert port_names(container) == {"http": profile["server"]["port"]}
    assert compose_port["target"] == profile["server"]["port"]
    service = one(objs, "Service", statefulset["spec"]["serviceName"])
    assert [p["port"] for p in service["spec"]["ports"]] == [profile["server"]["port"]]

    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    # compose's mounts, at the same paths and as read-only: the model, the profiles, the caches.
    for volume in compose["volumes"]:
        mount = mounts[volume["target"]]
        assert mount.get("readOnly", False) == volume.get("read_only", False), volume["target"]
    assert mounts[profile["model"]["path"]]["readOnly"] is True
    cache = next(v for v in compose["volumes"] if v["type"] == "volume")
    # Kept on the node, as compose keeps them in a named volume.
    assert "hostPath" in volumes[mounts[cache["target"]]["name"]]

    shm = volumes[mounts["/dev/shm"]["name"]]["emptyDir"]
    assert shm["medium"] == "Memory"
    assert quantity_bytes(shm["sizeLimit"]) >= profile["doctor"]["min_shm_gib"] * 2**30
    resources = container["resources"]
    assert int(resources["limits"]["nvidia.com/gpu"]) == 1
    ram = profile["model"]["min_host_ram_gb"] * 10**9 + quantity_bytes(shm["sizeLimit"])
    assert quantity_bytes(resources["requests"]["memory"]) >= ram
    [term] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert matches(
        term["labelSelector"]["matchLabels"], statefulset["spec"]["template"]["metadata"]["labels"]
    )

    annotations = statefulset["spec"]["template"]["metadata"]["annotations"]
    assert profile["server"]["enable_metrics"] is True
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(profile["server"]["port"])
    assert annotations["prometheus.io/path"] == "/metrics"


def test_engine_probes_allow_for_loading_and_long_prefills(
    renders: dict[str, list[Obj]], compose_gpu: dict[str, Any], gateway_settings: Settings
) -> None:
    objs = renders["single-node"]
    statefulset = one(objs, "StatefulSet", "engine")
    container = container_of(statefulset)
    profile_path = Path(container["args"][container["args"].index("--profile") + 1])
    profiles = mounted_configmap(objs, statefulset, str(profile_path.parent))
    profile = yaml.safe_load(profiles["data"][profile_path.name])
    compose = compose_gpu["engine"]["healthcheck"]

    probes = {kind: container[kind] for kind in ("startupProbe", "readinessProbe", "livenessProbe")}
    for kind, probe in probes.items():
        assert probe["httpGet"]["path"] == "/health", kind
        assert "/health" in " ".join(compose["test"])
        assert probe["httpGet"]["port"] == "http", kind
        # Long enough to hear SGLang's own verdict rather than time out first.
        assert probe["timeoutSeconds"] > SGLANG_HEALTH_WAIT_S, kind
    assert window_s(probes["startupProbe"]) >= seconds(compose["start_period"])
    # Listed for as long as the gateway calls a failing /health busy, not down.
    assert window_s(probes["readinessProbe"]) >= gateway_settings.routing.busy_probe_grace_s
    # Restarted only once SGLang's own watchdog would have acted.
    assert window_s(probes["livenessProbe"]) > profile["server"]["watchdog_timeout_s"]

    service = one(objs, "Service", statefulset["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is False


def test_one_engine_per_gpu_node(renders: dict[str, list[Obj]]) -> None:
    for variant, (overlay, _) in VARIANTS.items():
        spec = one(renders[variant], "StatefulSet", "engine")["spec"]
        # Each pod loads for up to an hour: all at once, not one after the other.
        assert spec["podManagementPolicy"] == "Parallel"
        if overlay == "single-node":
            assert spec["replicas"] == 1, variant
        else:
            assert spec["replicas"] > 1, variant


# ------------------------------------------------------------------ the gateway


def test_gateway_matches_compose_and_its_settings(
    renders: dict[str, list[Obj]], compose_gpu: dict[str, Any], gateway_settings: Settings
) -> None:
    objs = renders["single-node"]
    deployment = one(objs, "Deployment", "gateway")
    pod, container = pod_spec(deployment), container_of(deployment)
    compose = compose_gpu["gateway"]

    assert container["image"] == compose["image"]
    [compose_port] = compose["ports"]
    assert port_names(container) == {"http": gateway_settings.port}
    assert compose_port["target"] == gateway_settings.port
    assert deployment["spec"]["replicas"] == 2

    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[kind]["httpGet"]["port"] == "http", kind
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(gateway_settings.port)
    # Probes and scrapes carry no API key.
    assert not gateway_settings.auth.protect_health
    assert not gateway_settings.auth.protect_metrics

    # preStop, then the drain (grace_s, abort_grace_s, uvicorn's 1 s backstop), then a margin.
    shutdown = gateway_settings.shutdown
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    drain = int(shutdown.grace_s + shutdown.abort_grace_s) + 1
    needed = int(command[1]) + drain + GATEWAY_STOP_MARGIN_S
    assert pod["terminationGracePeriodSeconds"] >= needed

    [budget] = of_kind(objs, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert selected(objs, budget["spec"]["selector"]["matchLabels"]) == [deployment]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]


async def test_gateway_answers_its_probe_and_scrape_paths(
    renders: dict[str, list[Obj]], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = one(renders["single-node"], "Deployment", "gateway")
    container = container_of(deployment)
    paths = {
        kind: container[kind]["httpGet"]["path"]
        for kind in ("startupProbe", "readinessProbe", "livenessProbe")
    }
    paths["scrape"] = deployment["spec"]["template"]["metadata"]["annotations"][
        "prometheus.io/path"
    ]
    for name in list(os.environ):
        if name.startswith("FLASHBOX_"):
            monkeypatch.delenv(name)
    # Every engine answers 503, as while the engines load.
    loading = httpx.MockTransport(lambda request: httpx.Response(503))
    app = create_app(Settings(engines=["http://engine:30000"]), transport=loading)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client,
    ):
        status = {kind: (await client.get(path)).status_code for kind, path in paths.items()}
    # Alive and scrapable, not ready: no traffic until an engine is healthy.
    assert status == {
        "startupProbe": 200,
        "livenessProbe": 200,
        "scrape": 200,
        "readinessProbe": 503,
    }


def test_gateway_environment_names_settings_fields(renders: dict[str, list[Obj]]) -> None:
    known = settings_env_names(Settings) | GATEWAY_ENV_OUTSIDE_FIELDS
    assert "FLASHBOX_REASONING__SIGNING_KEY" in known
    used = {
        name
        for objs in renders.values()
        for name in env_of(container_of(one(objs, "Deployment", "gateway")))
        if name.startswith("FLASHBOX_")
    }
    assert used - known == set(), "not a gateway setting (gateway/settings.py)"


def test_gateway_finds_engines_and_state_by_service_name(
    renders: dict[str, list[Obj]], gateway_settings: Settings
) -> None:
    objs = renders["single-node"]
    env = env_of(container_of(one(objs, "Deployment", "gateway")))
    names = list(env)
    engine = one(objs, "Service", one(objs, "StatefulSet", "engine")["spec"]["serviceName"])

    # $(POD_NAMESPACE) expands only from a variable defined before it.
    namespace = env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert namespace == "metadata.namespace"
    assert names.index("POD_NAMESPACE") < names.index("FLASHBOX_DISCOVERY__DNS_NAME")
    fqdn = f"{engine['metadata']['name']}.$(POD_NAMESPACE).svc.cluster.local"
    assert env["FLASHBOX_DISCOVERY__DNS_NAME"]["value"] == fqdn
    [engine_port] = engine["spec"]["ports"]
    assert env["FLASHBOX_DISCOVERY__PORT"]["value"] == str(engine_port["port"])
    discovery = gateway_settings.model_dump()["discovery"]
    assert discovery["dns_name"] == f"{engine['metadata']['name']}.flashbox.svc.cluster.local"
    assert discovery["port"] == engine_port["port"]

    state = urlsplit(env["FLASHBOX_STATE_URL"]["value"])
    assert state.scheme == "redis"
    valkey = one(objs, "Service", str(state.hostname))
    assert state.port in [p["port"] for p in valkey["spec"]["ports"]]
    [store] = selected(objs, valkey["spec"]["selector"])
    assert re.fullmatch(r"valkey/valkey:\d+\.\d+\.\d+", container_of(store)["image"])


def test_secrets_come_from_the_generated_secret_and_the_example_holds_none(
    renders: dict[str, list[Obj]],
) -> None:
    documented = _documented_secrets()
    assert set(documented) == {"FLASHBOX_API_KEYS", "FLASHBOX_REASONING__SIGNING_KEY"}
    assert all(not value.strip() for value in documented.values()), "never a real secret"
    for objs in renders.values():
        [secret] = of_kind(objs, "Secret")
        references = {
            entry["name"]: entry["valueFrom"]["secretKeyRef"]
            for entry in env_of(container_of(one(objs, "Deployment", "gateway"))).values()
            if "secretKeyRef" in entry.get("valueFrom", {})
        }
        assert set(references) == set(documented)
        for name, reference in references.items():
            assert reference == {"name": secret["metadata"]["name"], "key": name}


def test_no_secret_is_committed() -> None:
    ignored = (K8S / ".gitignore").read_text().split()
    assert "secrets.env" in ignored
    for path in K8S.rglob("*.yaml"):
        assert not re.search(r"^kind:\s*Secret\b", path.read_text(), flags=re.M), path


# ------------------------------------------------------------------ monitoring and images


def test_service_monitors_match_compose_prometheus(renders: dict[str, list[Obj]]) -> None:
    prometheus = yaml.safe_load(
        (REPO_ROOT / "monitoring" / "prometheus" / "prometheus.yml").read_text()
    )
    jobs = {job["job_name"] for job in prometheus["scrape_configs"]}
    interval = prometheus["global"]["scrape_interval"]
    # kubernetes-validate has no schemas for custom resources: their shape is checked here.
    spec_keys = {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    endpoint_keys = {
        "port", "path", "interval", "scrapeTimeout", "scheme", "relabelings", "metricRelabelings"
    }  # fmt: skip
    relabel_keys = {"sourceLabels", "targetLabel", "replacement", "regex", "separator", "action"}
    for variant, (_, operator) in VARIANTS.items():
        objs = renders[variant]
        monitors = of_kind(objs, "ServiceMonitor")
        if not operator:
            assert monitors == [], variant
            continue
        seen = set()
        for monitor in monitors:
            assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
            assert set(monitor["spec"]) <= spec_keys
            services = [
                s
                for s in of_kind(objs, "Service")
                if matches(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
            ]
            assert len(services) == 1, monitor["metadata"]["name"]
            for endpoint in monitor["spec"]["endpoints"]:
                assert set(endpoint) <= endpoint_keys
                assert endpoint["port"] in [p["name"] for p in services[0]["spec"]["ports"]]
                assert endpoint["path"] == "/metrics"
                assert endpoint["interval"] == interval
                for relabel in endpoint["relabelings"]:
                    assert set(relabel) <= relabel_keys
                    if relabel["targetLabel"] == "job":
                        seen.add(relabel["replacement"])
        assert seen == jobs, "the dashboards and alerts select on compose's job names"


def test_images_are_pinned_and_agree_with_compose(renders: dict[str, list[Obj]]) -> None:
    compose = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())
    # Images compose names literally (no ${...}): one with the same repository has the same tag.
    literal: dict[str, str] = {}
    for service in compose["services"].values():
        image = service.get("image", "${")
        if "${" not in image:
            repository, _, tag = image.rpartition(":")
            literal[repository] = tag
    for objs in renders.values():
        for workload in workloads(objs):
            image = container_of(workload)["image"]
            repository, _, tag = image.rpartition(":")
            assert repository, image
            assert tag not in {"", "latest"}, image
            if repository in literal:
                assert tag == literal[repository], image
