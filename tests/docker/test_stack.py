"""The compose stack in Docker, through its published ports (`make test-docker`, which CI runs).

Images the registries would give are built locally from Debian's packages
(scripts/docker_stack: the Python base, Prometheus, Valkey) and passed in through the build
argument and compose variables whose defaults stay the official images; the gateway and sim
targets are built from the Dockerfile unchanged. Grafana has no Debian package, so the stack
here runs without it. Everything started is removed at the end, failures included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.procs import REPO_ROOT

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1500)]

PROJECT = "flashbox-test"
GATEWAY = "http://127.0.0.1:8080"
PROMETHEUS = "http://127.0.0.1:9090"
MODEL = "glm-5.3-flash"
COMPOSE = REPO_ROOT / ".venv" / "bin" / "docker-compose"
SERVICES = ["gateway-sim", "engine-sim-a", "engine-sim-b", "prometheus", "jaeger"]
JAEGER = "http://127.0.0.1:16686"
# The stack runs with the tracing profile: the gateway exports to the Jaeger service (here its
# stand-in, scripts/docker_stack/Dockerfile.jaeger) by the standard variable alone.
TRACING = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4317"}
HEALTH_WAIT_S = 120.0


def _env(**extra: str) -> dict[str, str]:
    from scripts.docker_stack.__main__ import compose_env

    return {
        **os.environ,
        **compose_env(),
        "FLASHBOX_GATEWAY_ADDR": "127.0.0.1",
        "FLASHBOX_API_KEYS": "",
        **TRACING,
        **extra,
    }


def compose(*args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    argv = [str(COMPOSE), "-p", PROJECT, "-f", str(REPO_ROOT / "compose.yaml"), *args]
    done = subprocess.run(
        argv, env=env or _env(), capture_output=True, text=True, timeout=900, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout + done.stderr


def _health(service: str) -> str:
    ids = compose("ps", "-q", service).split()
    if not ids:
        return "absent"
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Health.Status}}", ids[-1]],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip()


def _wait_healthy(services: list[str]) -> None:
    deadline = time.monotonic() + HEALTH_WAIT_S
    status: dict[str, str] = {}
    while time.monotonic() < deadline:
        status = {s: _health(s) for s in services}
        if all(v == "healthy" for v in status.values()):
            return
        time.sleep(2)
    raise AssertionError(
        f"not healthy in {HEALTH_WAIT_S:g} s: {status}\n{compose('logs', '--tail', '50')}"
    )


def _gateway_up() -> None:
    deadline = time.monotonic() + HEALTH_WAIT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(GATEWAY + "/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(
        f"the gateway is not ready\n{compose('logs', '--tail', '50', 'gateway-sim')}"
    )


@pytest.fixture(scope="module")
def stack() -> Iterator[dict[str, Any]]:
    if shutil.which("docker") is None or not COMPOSE.exists():
        pytest.skip("docker (apt-get install docker.io) and the venv's docker-compose are needed")
    from scripts.docker_stack.__main__ import prepare

    prepare()
    facts: dict[str, Any] = {}
    try:
        started = time.monotonic()
        compose("--profile", "sim", "build", "gateway-sim", "engine-sim-a")
        facts["build_s"] = time.monotonic() - started
        compose("--profile", "sim", "--profile", "tracing", "up", "-d", *SERVICES)
        _wait_healthy(["gateway-sim", "engine-sim-a", "engine-sim-b"])
        _gateway_up()
        yield facts
    finally:
        compose(
            *("--profile", "sim", "--profile", "fleet", "--profile", "tracing"),
            *("down", "-v", "--remove-orphans"),
            check=False,
        )


def _chat(max_tokens: int = 8, **kwargs: Any) -> Any:
    client = openai.OpenAI(base_url=GATEWAY + "/v1", api_key="unused", max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=kwargs.pop("messages", [{"role": "user", "content": "Hello"}]),
        max_tokens=max_tokens,
        **kwargs,
    )


def test_all_three_faces_answer_through_the_published_port(stack: dict[str, Any]) -> None:
    chat = _chat().parse()
    assert chat.choices[0].message.content is not None
    responses = openai.OpenAI(base_url=GATEWAY + "/v1", api_key="unused", max_retries=0)
    answer = responses.responses.create(model=MODEL, input="Hello", max_output_tokens=16)
    assert answer.status in ("completed", "incomplete")
    messages = anthropic.Anthropic(base_url=GATEWAY, api_key="unused", max_retries=0)
    message = messages.messages.create(
        model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "Hello"}]
    )
    assert message.content
    metrics = httpx.get(GATEWAY + "/metrics", timeout=5).text
    assert "flashbox_ttft_seconds_bucket" in metrics


def test_a_request_s_trace_is_found_in_jaeger_by_its_response_header(
    stack: dict[str, Any],
) -> None:
    """The tracing profile: the id the client got back names a trace that the Jaeger service
    holds, with the gateway's server span and its engine-call span."""
    raw = _chat()
    trace_id = raw.headers["x-flashbox-trace-id"]
    wanted = {"POST /v1/chat/completions", f"chat {MODEL}"}
    deadline = time.monotonic() + 60
    names: set[str] = set()
    while time.monotonic() < deadline:
        answer = httpx.get(f"{JAEGER}/api/traces/{trace_id}", timeout=5)
        if answer.status_code == 200:
            names = {span["operationName"] for span in answer.json()["data"][0]["spans"]}
            if names >= wanted:
                return
        time.sleep(1)  # the gateway exports in batches
    raise AssertionError(f"trace {trace_id}: spans {sorted(names)}, wanted {sorted(wanted)}")


def test_prometheus_scrapes_the_gateway_and_both_simulators(stack: dict[str, Any]) -> None:
    _chat()
    deadline = time.monotonic() + 60
    up: dict[str, str] = {}
    series: list[Any] = []
    while time.monotonic() < deadline:
        targets = httpx.get(PROMETHEUS + "/api/v1/targets", timeout=5).json()["data"]
        up = {t["labels"]["instance"]: t["health"] for t in targets["activeTargets"]}
        query = httpx.get(
            PROMETHEUS + "/api/v1/query",
            params={"query": "flashbox_ttft_seconds_count"},
            timeout=5,
        ).json()
        series = query["data"]["result"]
        if len(up) >= 3 and all(h == "up" for h in up.values()) and series:
            break
        time.sleep(2)
    assert up.get("gateway:8080") == "up", up
    assert up.get("engine-sim-a:30000") == "up", up
    assert up.get("engine-sim-b:30000") == "up", up
    assert series, "no flashbox_ttft_seconds_count series in Prometheus"


def test_images_are_lean_and_run_as_non_root(stack: dict[str, Any]) -> None:
    report = {}
    for image in ("flashbox-gateway:dev", "flashbox-sim:dev"):
        info = json.loads(
            subprocess.run(
                ["docker", "image", "inspect", image], capture_output=True, text=True, check=True
            ).stdout
        )[0]
        assert info["Config"]["User"] == "10001", image
        listing = subprocess.run(
            ["docker", "run", "--rm", "--entrypoint", "ls", image, "-A", "/app"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert not {"tests", ".env", ".git", "bench", "scripts", ".venv"} & set(listing), listing
        report[image] = {"size_mb": round(info["Size"] / 1e6), "app": listing}
    print("images:", report, "build:", round(stack["build_s"]), "s")


def _stream_in_thread(results: list[Any]) -> threading.Thread:
    def run() -> None:
        try:
            client = openai.OpenAI(base_url=GATEWAY + "/v1", api_key="unused", max_retries=0)
            finish = None
            with client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "Write a long story."}],
                max_tokens=120,
                stream=True,
            ) as stream:
                for chunk in stream:
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
            results.append(finish)
        except Exception as exc:  # the test reports what the client saw
            results.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_compose_stop_lets_an_in_flight_stream_finish(stack: dict[str, Any]) -> None:
    results: list[Any] = []
    thread = _stream_in_thread(results)
    time.sleep(1.0)  # the stream is running (the simulator decodes at the reference pace)
    compose("stop", "gateway-sim")
    thread.join(timeout=120)
    assert len(results) == 1, results
    assert results[0] in ("stop", "length"), results
    compose("start", "gateway-sim")
    _gateway_up()


def test_a_gateway_restart_on_valkey_keeps_the_sessions_checkpoint(stack: dict[str, Any]) -> None:
    env = _env(FLASHBOX_STATE_URL="redis://valkey:6379/0")
    compose("--profile", "sim", "--profile", "fleet", "up", "-d", "valkey", "gateway-sim", env=env)
    _wait_healthy(["gateway-sim"])
    _gateway_up()
    metrics = httpx.get(GATEWAY + "/metrics", timeout=5).text
    assert "flashbox_state_up 1.0" in metrics
    history: list[dict[str, Any]] = [{"role": "user", "content": "Tell me about caches. " * 300}]
    headers = {"x-session-id": "docker-session-1"}
    replicas = []
    for turn in range(3):
        if turn == 2:
            compose("--profile", "sim", "--profile", "fleet", "restart", "gateway-sim", env=env)
            _gateway_up()
        raw = _chat(max_tokens=8, messages=history, extra_headers=headers)
        replicas.append(raw.headers["x-flashbox-replica"])
        answer = raw.parse().choices[0].message
        history += [{"role": "assistant", "content": answer.content}]
        history += [{"role": "user", "content": f"And turn {turn + 2}?"}]
    assert len(set(replicas)) == 1, replicas
    after = httpx.get(GATEWAY + "/metrics", timeout=5).text
    hits = [
        line
        for line in after.splitlines()
        if line.startswith("flashbox_affinity_total") and 'outcome="hit"' in line
    ]
    assert any(not line.endswith(" 0.0") for line in hits), hits


def test_a_code_only_change_rebuilds_only_the_source_layers(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    """The dependencies layer is built before the sources are copied: a changed source file
    reuses every layer up to the last COPY."""
    context = tmp_path / "context"
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in tracked:
        source = REPO_ROOT / name
        if source.is_file():
            target = context / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    python_image = _env()["FLASHBOX_PYTHON_IMAGE"]

    def build(tag: str) -> list[str]:
        subprocess.run(
            ["docker", "build", "-q", "--target", "gateway", "--build-arg",
             f"PYTHON_IMAGE={python_image}", "-t", tag, str(context)],
            capture_output=True, text=True, check=True, timeout=900,
        )  # fmt: skip
        inspect = subprocess.run(
            ["docker", "image", "inspect", "-f", "{{json .RootFS.Layers}}", tag],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return list(json.loads(inspect.stdout))

    try:
        before = build("flashbox-test-layers:a")
        app = context / "gateway" / "__init__.py"
        app.write_text(app.read_text() + "\n# a code-only change\n")
        started = time.monotonic()
        after = build("flashbox-test-layers:b")
        seconds = time.monotonic() - started
    finally:
        subprocess.run(
            ["docker", "rmi", "-f", "flashbox-test-layers:a", "flashbox-test-layers:b"],
            capture_output=True, check=False,
        )  # fmt: skip
    assert len(before) == len(after)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    # Only the layer that copies gateway/ (the last before USER, which adds none) changed.
    assert changed == [len(before) - 1], changed
    print(f"code-only rebuild: {seconds:.1f} s, {len(changed)} of {len(before)} layers")
