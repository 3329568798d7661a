"""compose.yaml's optional fleet profile: Valkey for gateways that share routing state, pinned
to the image deploy/k8s runs, and nothing of it in the other profiles."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.settings import Settings
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
            # Empty: the gateway keeps its state in process (gateway.settings).
            assert (service.get("environment") or {}).get("FLASHBOX_STATE_URL", "") == ""


def test_one_line_in_env_points_the_gateway_at_the_profiles_valkey(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text(ENV_EXAMPLE.read_text() + "\nFLASHBOX_STATE_URL=redis://valkey:6379/0\n")
    assert "valkey" in compose_config("fleet", env)["services"]
    for profile, name in (("sim", "gateway-sim"), ("gpu", "gateway")):
        gateway = compose_config(profile, env)["services"][name]["environment"]
        assert gateway["FLASHBOX_STATE_URL"] == "redis://valkey:6379/0"
    settings = Settings(engines=["http://e:1"], state_url=gateway["FLASHBOX_STATE_URL"])
    assert settings.state_url == "redis://valkey:6379/0"
