"""compose.yaml's optional fleet profile: Valkey for gateways that share routing state, pinned
to the image deploy/k8s runs, and nothing of it in the other profiles."""

from __future__ import annotations

import re

from tests.support.procs import REPO_ROOT
from tests.test_compose import ENV_EXAMPLE, compose_config


def test_the_fleet_profile_adds_valkey_pinned_like_deploy_k8s() -> None:
    services = compose_config("fleet", ENV_EXAMPLE)["services"]
    valkey = services["valkey"]
    k8s = (REPO_ROOT / "deploy" / "k8s" / "base" / "valkey.yaml").read_text()
    assert valkey["image"] == re.search(r"image: (valkey/valkey:\S+)", k8s)[1]  # type: ignore[index]
    assert "ports" not in valkey  # the compose network only
    command = valkey["command"]
    assert command[command.index("--maxmemory-policy") + 1] == "allkeys-lru"
    assert command[command.index("--save") + 1] == ""


def test_the_other_profiles_run_without_it() -> None:
    for profile in ("gpu", "sim"):
        services = compose_config(profile, ENV_EXAMPLE)["services"]
        assert "valkey" not in services
        for service in services.values():
            assert "FLASHBOX_STATE_URL" not in (service.get("environment") or {})
