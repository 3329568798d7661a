"""Fixtures for tests/deploy: the rendered overlays, compose's view, the gateway's settings."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.settings import Settings
from tests.deploy.manifests import (
    VARIANTS,
    Obj,
    container_of,
    copy_tree,
    find_kustomize,
    one,
    pod_spec,
    render,
)
from tests.test_compose import compose_config


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Obj]]:
    command, why = find_kustomize()
    if command is None:
        pytest.skip(why)
    out: dict[str, list[Obj]] = {}
    for variant, (overlay, operator) in VARIANTS.items():
        root = tmp_path_factory.mktemp("k8s")
        copy_tree(root, operator)
        out[variant] = render(command, root, overlay)
    return out


@pytest.fixture(scope="module")
def compose_gpu(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # compose's defaults, as with no .env at all.
    empty = tmp_path_factory.mktemp("env") / "empty.env"
    empty.write_text("")
    services: dict[str, Any] = compose_config("gpu", empty)["services"]
    return services


@pytest.fixture
def gateway_settings(
    renders: dict[str, list[Obj]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Settings:
    """The gateway's settings as its pod builds them: the container's environment (secrets
    filled with samples) over the mounted gateway-config."""
    objs = renders["single-node"]
    deployment = one(objs, "Deployment", "gateway")
    namespace = deployment["metadata"]["namespace"]
    mounts: dict[str, Path] = {}
    for mount in container_of(deployment)["volumeMounts"]:
        [volume] = [v for v in pod_spec(deployment)["volumes"] if v["name"] == mount["name"]]
        if "configMap" in volume:
            directory = tmp_path / mount["name"]
            directory.mkdir()
            for key, text in one(objs, "ConfigMap", volume["configMap"]["name"])["data"].items():
                (directory / key).write_text(text)
            mounts[mount["mountPath"]] = directory
    env: dict[str, str] = {}
    for entry in container_of(deployment)["env"]:
        source = entry.get("valueFrom", {})
        if "secretKeyRef" in source:
            value = f"sample-{entry['name'].lower()}"
        elif "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "metadata.namespace"
            value = namespace
        else:
            # Kubernetes expands $(NAME) from the variables defined above it.
            value = re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], entry["value"])
        for mount_path, directory in mounts.items():
            if value.startswith(mount_path + "/"):
                value = str(directory / value.removeprefix(mount_path + "/"))
        env[entry["name"]] = value
    for name in list(os.environ):
        if name.startswith("FLASHBOX_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()
