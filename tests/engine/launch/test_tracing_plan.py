"""Engine tracing in the launch plan (engine/launch/plan.py `_tracing`): a profile or the
standard OTLP variables turn it on; the launcher then runs SGLang through
engine/launch/traced_server.py at a trace level with no span per decode step unless asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.launch.host import probe
from engine.launch.plan import TRACED_MODULE, LaunchPlan, build_plan
from engine.launch.profile import EngineProfile, load_profile
from engine.launch.traced_server import LEVEL_ENV
from tests.engine.fixtures.hosts import NO_GPU, host_sources

REPO = Path(__file__).resolve().parents[3]
PROFILE = REPO / "config" / "engine" / "cpu-tiny-hybrid.yaml"


def _plan(tmp_path: Path, environ: dict[str, str], **tracing: object) -> LaunchPlan:
    profile = load_profile(PROFILE)
    if tracing:
        section = profile.tracing.model_copy(update=tracing)
        profile = profile.model_copy(update={"tracing": section})
    assert isinstance(profile, EngineProfile)
    host = probe(host_sources(NO_GPU, tmp_path))
    return build_plan(profile, host, python="py", environ=environ, prefix_cache_available=True)


def _flag(argv: tuple[str, ...], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_off_unless_asked_the_plain_server(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {})
    assert plan.argv[1:3] == ("-m", "sglang.launch_server")
    assert "--enable-trace" not in plan.argv
    assert LEVEL_ENV not in plan.env


def test_the_gateways_variables_turn_it_on_at_level_2(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4317"})
    assert plan.argv[1:3] == ("-m", TRACED_MODULE)
    assert "--enable-trace" in plan.argv
    assert _flag(plan.argv, "--otlp-traces-endpoint") == "http://jaeger:4317"
    assert plan.env[LEVEL_ENV] == "2"
    assert any("trace level 2" in note for note in plan.notes)


def test_http_protobuf_gets_the_full_traces_url(tmp_path: Path) -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318/",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    }
    plan = _plan(tmp_path, environ)
    assert _flag(plan.argv, "--otlp-traces-endpoint") == "http://jaeger:4318/v1/traces"
    # sglang-kt reads only the traces variable for its protocol.
    assert plan.env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"


@pytest.mark.parametrize(
    ("enabled", "environ", "on"),
    [
        (True, {}, True),
        (False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4317"}, False),
        (
            "auto",
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "c:4317", "OTEL_SDK_DISABLED": "true"},
            False,
        ),
    ],
)
def test_the_profile_decides_when_it_says(
    tmp_path: Path, enabled: bool | str, environ: dict[str, str], on: bool
) -> None:
    plan = _plan(tmp_path, environ, enabled=enabled, level=3)
    assert ("--enable-trace" in plan.argv) is on
    if on:
        assert _flag(plan.argv, "--otlp-traces-endpoint") == "localhost:4317"
        assert plan.env[LEVEL_ENV] == "3"
        assert any("a span per decode step" in note for note in plan.notes)


def test_an_unknown_protocol_stops_the_launch(tmp_path: Path) -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "x:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
    plan = _plan(tmp_path, environ)
    assert any("http/json" in problem for problem in plan.problems)
