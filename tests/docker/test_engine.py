"""The engine image and compose's `cpu` profile in Docker, through the published ports
(`make test-docker`, which CI runs).

The engine target is built from the Dockerfile with the stand-ins of
scripts/docker_stack/engine_image.py (a Debian base for the CUDA image, uv from PyPI, Debian's
Python 3.11, a wheelhouse of the pins served on loopback), then compose runs that image with
the CPU test profile and the tiny hybrid model of `make engine-cpu`, beside the gateway and
Prometheus. The test-only shims and profile are mounted from the checkout. What this does not
prove (CUDA kernels, the GPU profile's memory, GLM itself) is in docs/deploy.md.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml

from tests.support.procs import REPO_ROOT

# The build from nothing (a 5 GB wheelhouse, a 10 GB image) takes most of this on 2 cores.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(3600)]

PROJECT = "flashbox-engine-test"
GATEWAY = "http://127.0.0.1:8080"
PROMETHEUS = "http://127.0.0.1:9090"
ENGINE = "http://127.0.0.1:30000"
MODEL = "glm-5.3-flash"
COMPOSE = REPO_ROOT / ".venv" / "bin" / "docker-compose"
SERVICES = ["engine-cpu", "gateway", "prometheus"]
ENGINE_IMAGE = "flashbox-engine:dev"
DASHBOARD = REPO_ROOT / "monitoring" / "grafana" / "dashboards" / "flashbox-engine.json"
CPU_PROFILE = REPO_ROOT / "config" / "engine" / "cpu-tiny-hybrid.yaml"
CONTAINER_PROFILE = REPO_ROOT / "scripts" / "docker_stack" / "cpu-tiny-hybrid.yaml"
# Start to healthy is ~20 s on 2 idle cores; a loaded CI machine may take several times that.
ENGINE_HEALTH_WAIT_S = 600.0
GATEWAY_WAIT_S = 120.0
# The gateway probes each replica every few seconds; this bounds how long "down" may take.
DOWN_WAIT_S = 60.0
# Prometheus scrapes every 5 s; a rate needs two samples after the traffic.
SCRAPE_WAIT_S = 90.0
RATE_WINDOW = "2m"
# What stopping may take: the engine's stop_grace_period in compose.yaml is 60 s.
STOP_TIMEOUT_S = 60
# The image holds CUDA torch and its libraries (~10 GB); a bound so that growth is noticed.
IMAGE_MAX_GB = 16.0
CACHE = "/var/lib/flashbox/.cache"
SENTINEL = f"{CACHE}/flashbox-test-sentinel"
# What a patch that did not load prints (engine/launch/flashbox_engine_patches.pth,
# engine/patches/autoload.py, guard.py, the shims' sitecustomize).
PATCH_FAILURES = (
    "engine patches not loaded",
    ": not installed",
    ": not applied",
    "hybrid_patches not installed",
    "sgl_kernel_cpu_ops not loaded",
)
# The prefix-cache patch's own line when its validator turns it on (as on the GPU host).
PATCH_ON = "GLM-5-Next prefix cache on: 256-token unit"


def _env(**extra: str) -> dict[str, str]:
    from scripts.docker_stack.__main__ import compose_env

    return {
        **os.environ,
        **compose_env(),
        "FLASHBOX_GATEWAY_ADDR": "127.0.0.1",
        "FLASHBOX_API_KEYS": "",
        **extra,
    }


def compose(*args: str, check: bool = True, timeout: float = 900) -> str:
    """Its standard output (compose's progress lines go to standard error)."""
    argv = [str(COMPOSE), "-p", PROJECT, "-f", str(REPO_ROOT / "compose.yaml"), "--profile", "cpu"]
    done = subprocess.run(
        [*argv, *args], env=_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def docker(*args: str, check: bool = True) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done.stdout


def _container(service: str) -> str:
    ids = compose("ps", "-a", "-q", service).split()
    assert ids, f"no container for {service}"
    return ids[-1]


def _state(service: str) -> dict[str, Any]:
    raw = docker("inspect", "-f", "{{json .State}}", _container(service))
    state: dict[str, Any] = json.loads(raw)
    return state


def _wait_engine_healthy() -> float:
    """Seconds until Docker's own healthcheck calls the engine container healthy."""
    started = time.monotonic()
    deadline = started + ENGINE_HEALTH_WAIT_S
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        state = _state("engine-cpu")
        if state.get("Health", {}).get("Status") == "healthy":
            return time.monotonic() - started
        # An engine that exited is restarted by its policy (unless-stopped): fail at once.
        restarts = int(docker("inspect", "-f", "{{.RestartCount}}", _container("engine-cpu")))
        if restarts or state.get("Status") in ("exited", "dead", "restarting"):
            break
        time.sleep(2)
    raise AssertionError(
        f"the engine never turned healthy: {state.get('Status')}, exit code "
        f"{state.get('ExitCode')}, "
        f"{state.get('Health', {}).get('Status')}\n{compose('logs', '--tail', '80', 'engine-cpu')}"
    )


def _wait_ready(want: int) -> dict[str, Any]:
    """The gateway's /ready once it answers `want` (200: a replica takes work, 503: none)."""
    deadline = time.monotonic() + GATEWAY_WAIT_S
    last: Any = None
    while time.monotonic() < deadline:
        try:
            answer = httpx.get(GATEWAY + "/ready", timeout=2)
            last = (answer.status_code, answer.text)
            if answer.status_code == want:
                body: dict[str, Any] = answer.json()
                return body
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(1)
    raise AssertionError(
        f"/ready never answered {want}: {last}\n{compose('logs', '--tail', '40', 'gateway')}"
    )


def _context_copy(target: Path) -> Path:
    """The working tree's files (tracked, and new ones git does not ignore) as a build context."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\n")  # fmt: skip
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():
            copy = target / name
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)
    return target


def _layers(tag: str) -> list[str]:
    return list(json.loads(docker("image", "inspect", "-f", "{{json .RootFS.Layers}}", tag)))


@pytest.fixture(scope="module")
def engine_image() -> dict[str, Any]:
    """flashbox-engine:dev, built from the Dockerfile with the stand-ins."""
    if shutil.which("docker") is None or not COMPOSE.exists():
        pytest.skip("docker (apt-get install docker.io) and the venv's docker-compose are needed")
    from scripts.docker_stack.__main__ import prepare
    from scripts.docker_stack.engine_image import build_engine

    prepare(engine=True)
    started = time.monotonic()
    built = build_engine()
    seconds = time.monotonic() - started
    if built.returncode != 0:
        pytest.fail(
            f"the engine image did not build ({built.returncode}):\n"
            f"{(built.stdout + built.stderr)[-6000:]}"
        )
    return {"build_s": seconds}


@pytest.fixture(scope="module")
def stack(engine_image: dict[str, Any]) -> Iterator[dict[str, Any]]:
    facts = dict(engine_image)
    try:
        compose("build", "gateway")
        compose("up", "-d", "--no-build", *SERVICES)
        facts["healthy_s"] = _wait_engine_healthy()
        _wait_ready(200)
        yield facts
    finally:
        compose("down", "-v", "--remove-orphans", check=False)


def _chat(**kwargs: Any) -> Any:
    client = openai.OpenAI(base_url=GATEWAY + "/v1", api_key="unused", max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=kwargs.pop("messages", [{"role": "user", "content": "Hello"}]),
        max_tokens=kwargs.pop("max_tokens", 8),
        **kwargs,
    )


def _counter(text: str, name: str, label: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and label in line
    )


def test_the_container_profile_is_the_cpu_profile_but_for_address_and_model() -> None:
    """The profile compose mounts for the CPU engine drifts from make engine-cpu's in nothing
    but the two lines a container needs."""
    ours = yaml.safe_load(CONTAINER_PROFILE.read_text())
    theirs = yaml.safe_load(CPU_PROFILE.read_text())
    assert (ours["server"].pop("host"), ours["model"].pop("path")) == ("0.0.0.0", "/model")
    theirs["server"].pop("host")
    theirs["model"].pop("path")
    assert ours == theirs


def test_the_engine_turns_healthy_and_its_log_shows_the_patches(stack: dict[str, Any]) -> None:
    state = _state("engine-cpu")
    assert state["Health"]["Status"] == "healthy"
    checks = state["Health"]["Log"]
    assert checks, "no healthcheck ran"
    assert checks[-1]["ExitCode"] == 0, checks[-1]
    log = compose("logs", "--no-color", "engine-cpu")
    assert PATCH_ON in log, log[-4000:]
    failures = [line for line in log.splitlines() if any(f in line for f in PATCH_FAILURES)]
    assert not failures, failures
    # The published port answers as SGLang does, with the tiny model under the served name.
    info = httpx.get(ENGINE + "/model_info", timeout=10).json()
    assert info["model_path"] == "/model", info
    print(
        f"engine image built in {stack['build_s']:.0f} s; healthy {stack['healthy_s']:.0f} s "
        "after compose up"
    )


def test_the_gateway_serves_the_three_faces_and_a_second_turn_is_a_verified_hit(
    stack: dict[str, Any],
) -> None:
    chat = _chat()
    assert chat.headers["x-flashbox-replica"], chat.headers
    assert chat.parse().choices[0].finish_reason in ("stop", "length")
    client = openai.OpenAI(base_url=GATEWAY + "/v1", api_key="unused", max_retries=0)
    answer = client.responses.create(model=MODEL, input="Hello", max_output_tokens=16)
    assert answer.status in ("completed", "incomplete")
    messages = anthropic.Anthropic(base_url=GATEWAY, api_key="unused", max_retries=0)
    message = messages.messages.create(
        model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "Hello"}]
    )
    assert message.stop_reason in ("end_turn", "max_tokens"), message

    # A session long enough for a 256-token checkpoint; its second turn must restore it.
    headers = {"x-session-id": "docker-engine-session"}
    history: list[dict[str, Any]] = [{"role": "user", "content": "Tell me about caches. " * 150}]
    first = _chat(messages=history, extra_headers=headers).parse()
    history += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "And the second turn?"},
    ]
    before = httpx.get(GATEWAY + "/metrics", timeout=5).text
    second = _chat(messages=history, extra_headers=headers).parse()
    after = httpx.get(GATEWAY + "/metrics", timeout=5).text
    hit = 'outcome="hit"'
    assert _counter(after, "flashbox_affinity_total", hit) == (
        _counter(before, "flashbox_affinity_total", hit) + 1
    ), [line for line in after.splitlines() if line.startswith("flashbox_affinity_total")]
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= 256, second.usage
    print(f"second turn: {second.usage.prompt_tokens} prompt tokens, {cached} cached")


def _dashboard_queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    queries = [
        (panel["title"], target["expr"])
        for panel in doc["panels"]
        for target in panel.get("targets") or []
        if target.get("expr")
    ]
    assert queries, "the engine dashboard has no queries"
    return queries


def _instant(expr: str) -> list[Any]:
    answer = httpx.get(PROMETHEUS + "/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    result: list[Any] = answer["data"]["result"]
    return result


def _has_data(result: list[Any]) -> bool:
    return any(math.isfinite(float(series["value"][1])) for series in result)


def test_prometheus_scrapes_the_engine_and_every_dashboard_query_has_data(
    stack: dict[str, Any],
) -> None:
    # Nothing but the real engine exports sglang:* here: no simulator runs in this project.
    running = set(compose("ps", "--services", "--status", "running").split())
    assert running == set(SERVICES), running
    deadline = time.monotonic() + SCRAPE_WAIT_S
    targets: dict[str, str] = {}
    while time.monotonic() < deadline:
        active = httpx.get(PROMETHEUS + "/api/v1/targets", timeout=5).json()["data"]
        targets = {t["labels"]["instance"]: t["health"] for t in active["activeTargets"]}
        if targets.get("engine:30000") == "up":
            break
        time.sleep(2)
    assert targets.get("engine:30000") == "up", targets

    # Traffic over two scrapes at least, so that every rate and quantile has an increase; the
    # same long prompt again, so that the engine counts cached tokens (a series it creates at
    # the first cache hit).
    prompt = [{"role": "user", "content": "Say something about scrapes. " * 60}]
    for turn in range(4):
        _chat(max_tokens=16, messages=[{"role": "user", "content": f"Count to {turn + 3}."}])
        _chat(max_tokens=4, messages=prompt)
        time.sleep(3)
    queries = [
        (title, expr.replace("$instance", "engine:30000").replace("$__rate_interval", RATE_WINDOW))
        for title, expr in _dashboard_queries()
    ]
    empty: list[tuple[str, str]] = []
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while time.monotonic() < deadline:
        empty = [(title, expr) for title, expr in queries if not _has_data(_instant(expr))]
        if not empty:
            break
        time.sleep(5)
    # Before 3.0 Prometheus does not ask for UTF-8 names, and sglang-kt's prometheus_client
    # then writes `sglang_` for `sglang:` in the samples: say so if that is what is stored.
    escaped = _instant('count({__name__=~"sglang_.+"})')
    assert not empty, f"engine dashboard queries with no data: {empty}; sglang_* stored: {escaped}"
    # The dashboard's replica picker lists the engine.
    variable = json.loads(DASHBOARD.read_text())["templating"]["list"][0]["query"]
    metric = variable.removeprefix("label_values(").split(",")[0]
    values = httpx.get(
        PROMETHEUS + "/api/v1/label/instance/values", params={"match[]": metric}, timeout=5
    ).json()["data"]
    assert values == ["engine:30000"], values
    print(f"engine dashboard: {len(queries)} queries, each with data")


def test_the_image_is_lean_and_runs_as_non_root(stack: dict[str, Any]) -> None:
    info = json.loads(docker("image", "inspect", ENGINE_IMAGE))[0]
    assert info["Config"]["User"] == "10001"
    assert info["Config"]["Entrypoint"] == ["python", "-m", "engine.launch"]
    assert info["Config"]["Healthcheck"]["Test"][0] == "CMD"

    def run(*argv: str) -> str:
        return docker("run", "--rm", "--entrypoint", argv[0], ENGINE_IMAGE, *argv[1:])

    assert run("ls", "-A", "/opt/flashbox").split() == ["config", "engine"]
    assert run("ls", "-A", "/opt/flashbox/engine").split() == [
        "__init__.py", "doctor", "launch", "patches",
    ]  # fmt: skip
    profiles = run("ls", "/opt/flashbox/config/engine").split()
    assert profiles
    assert not [p for p in profiles if p.startswith("cpu-tiny")], profiles
    # No test, no shim, no simulator anywhere in the image's Python or code.
    found = run(
        "find", "/opt", "-name", "tests", "-path", "/opt/flashbox/*", "-o",
        "-name", "hybrid_patches.py", "-o", "-name", "sgl_kernel_cpu_ops.py", "-o",
        "-name", "sitecustomize.py", "-path", "/opt/*", "-o",
        "-name", "sim", "-path", "/opt/flashbox/*",
    ).split()  # fmt: skip
    assert not found, found
    site = "/opt/venv/lib/python3.11/site-packages"
    assert run("cat", f"{site}/flashbox.pth").strip() == "/opt/flashbox"
    assert "engine.patches.autoload" in run("cat", f"{site}/flashbox_engine_patches.pth")
    # The running engine's processes: every one as uid 10001.
    rows = docker("top", _container("engine-cpu"), "-o", "pid,uid").splitlines()[1:]
    users = [row.split()[1] for row in rows]
    assert users
    assert set(users) == {"10001"}, users
    size_gb = info["Size"] / 1e9
    assert size_gb < IMAGE_MAX_GB, size_gb
    print(f"{ENGINE_IMAGE}: {size_gb:.1f} GB, {len(info['RootFS']['Layers'])} layers, uid 10001")


def test_stopping_the_engine_ends_it_cleanly_and_the_gateway_reports_it_down(
    stack: dict[str, Any],
) -> None:
    # Something in the compile-cache volume, written by the engine's own user (test below).
    compose("exec", "-T", "engine-cpu", "sh", "-c", f"echo kept > {SENTINEL}")
    started = time.monotonic()
    compose("stop", "-t", str(STOP_TIMEOUT_S), "engine-cpu")
    seconds = time.monotonic() - started
    state = _state("engine-cpu")
    assert state["Status"] == "exited", state
    assert not state["OOMKilled"], state
    # Within the grace period, so Docker never had to kill it.
    assert seconds < STOP_TIMEOUT_S, seconds
    tail = compose("logs", "--no-color", "--tail", "60", "engine-cpu")
    assert "SIGTERM received" in tail, tail
    assert "Traceback" not in tail, tail
    # sglang-kt drains, then ends its own process tree with SIGKILL (its force-shutdown path,
    # which the launcher turns on): the exit status is then 137 though Docker sent SIGTERM only.
    assert state["ExitCode"] == 0 or (state["ExitCode"] == 137 and "Force exiting" in tail), (
        state["ExitCode"],
        tail,
    )
    ready = _wait_ready(503)
    assert ready["status"] == "unavailable", ready
    assert not any(ready["replicas"].values()), ready
    metrics = httpx.get(GATEWAY + "/metrics", timeout=5).text
    up = [line for line in metrics.splitlines() if line.startswith("flashbox_replica_up{")]
    assert up
    assert all(line.endswith(" 0.0") for line in up), up
    print(f"engine stopped in {seconds:.1f} s, exit code {state['ExitCode']}")


def test_a_new_engine_container_keeps_the_model_and_compile_cache_volumes(
    stack: dict[str, Any],
) -> None:
    compose("stop", "-t", str(STOP_TIMEOUT_S), "engine-cpu")
    stat = ["stat", "-c", "%n %Y %s", "/model/config.json", "/model/.flashbox-stamp"]
    model_before = compose(
        "run", "--rm", "--no-deps", "--entrypoint", stat[0], "engine-cpu", *stat[1:]
    )  # fmt: skip
    cache_before = compose(
        "run", "--rm", "--no-deps", "--entrypoint", "ls", "engine-cpu", "-A", CACHE
    ).split()  # fmt: skip
    # A new container, not a restart of the old one (whose own layer would keep anything).
    compose("rm", "-f", "-s", "engine-cpu")
    compose("up", "-d", "--no-build", "engine-cpu")
    healthy_s = _wait_engine_healthy()
    _wait_ready(200)
    assert compose("exec", "-T", "engine-cpu", "cat", SENTINEL).strip() == "kept"
    model_after = compose("exec", "-T", "engine-cpu", *stat)
    assert model_after.split() == model_before.split(), (model_before, model_after)
    cache = compose("exec", "-T", "engine-cpu", "ls", "-A", CACHE).split()
    # The sentinel, and what the engine wrote there itself (flashinfer's JIT cache on the CPU).
    assert set(cache_before) <= set(cache), (cache_before, cache)
    assert _chat().parse().choices
    print(f"new engine container healthy in {healthy_s:.0f} s; compile-cache volume: {cache}")


def test_a_code_only_change_rebuilds_only_the_last_layer(
    engine_image: dict[str, Any], tmp_path: Path
) -> None:
    """The engine's sources are copied after every install: a changed source file reuses every
    layer before it. The build runs with no package index at all, so any install would fail."""
    from scripts.docker_stack.engine_image import build_engine

    context = _context_copy(tmp_path / "context")
    tags = ("flashbox-test-engine-layers:a", "flashbox-test-engine-layers:b")
    try:
        first = build_engine(context, tags[0], serve=False)
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        launcher = context / "engine" / "launch" / "__init__.py"
        launcher.write_text(launcher.read_text() + "\n# a code-only change\n")
        started = time.monotonic()
        second = build_engine(context, tags[1], serve=False)
        seconds = time.monotonic() - started
        assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
        before, after = _layers(tags[0]), _layers(tags[1])
    finally:
        docker("rmi", "-f", *tags, check=False)
    assert len(before) == len(after)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    # Only the layer that copies engine/launch/ (the last; USER and the rest add none).
    assert changed == [len(before) - 1], changed
    print(f"code-only engine rebuild: {seconds:.1f} s, {len(changed)} of {len(before)} layers")
