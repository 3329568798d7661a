"""Models, health, readiness, metrics, and the headers every response carries."""

from __future__ import annotations

import httpx

from gateway.observability.metrics import Metrics
from tests.gateway.conftest import MODEL, chat_body, gateway_client
from tests.gateway.fake_engine import FakeEngine

# The names monitoring/ depends on (dashboards and alerts).
CONTRACT = [
    "flashbox_requests_total",
    "flashbox_requests_in_flight",
    "flashbox_ttft_seconds",
    "flashbox_ttft_stage_seconds",
    "flashbox_inter_token_latency_seconds",
    "flashbox_e2e_latency_seconds",
    "flashbox_prompt_tokens_total",
    "flashbox_cached_tokens_total",
    "flashbox_generated_tokens_total",
    "flashbox_decode_tokens_per_second",
    "flashbox_prefill_tokens_per_second",
    "flashbox_template_render_seconds",
    "flashbox_affinity_total",
    "flashbox_replica_up",
    "flashbox_replica_in_flight",
    "flashbox_errors_total",
    "flashbox_upstream_aborts_total",
    "flashbox_retries_total",
    "flashbox_tool_calls_rejected_total",
    "flashbox_admission_rejected_total",
    "process_cpu_seconds_total",
]


async def test_models(client: httpx.AsyncClient) -> None:
    data = (await client.get("/v1/models")).json()
    assert [m["id"] for m in data["data"]] == [MODEL]


async def test_health_and_ready(engine: FakeEngine) -> None:
    async with gateway_client(engine) as client:
        assert (await client.get("/health")).status_code == 200
        ready = await client.get("/ready")
        assert ready.status_code == 200
        assert ready.json()["replicas"] == {"engine-a:30000": True}
        assert "x-request-id" in ready.headers
        assert ready.headers["x-flashbox-replica"] == "none"
    engine.healthy = False
    async with gateway_client(engine) as client:
        assert (await client.get("/ready")).status_code == 503


async def test_the_root_answers_a_probe_without_a_key(engine: FakeEngine) -> None:
    """Claude Code sends HEAD / to check the server before its first request (#31)."""
    async with gateway_client(engine, auth={"protect_health": True}, api_keys=["k"]) as client:
        head = await client.head("/")
        assert head.status_code == 200
        assert head.content == b""
        index = await client.get("/")
        assert index.status_code == 200
        assert index.text.count("\n") == 1
        assert "/v1/messages" in index.text
    assert engine.generates == []


def test_metric_names_are_the_contract() -> None:
    text = Metrics().exposition()[0].decode()
    for name in CONTRACT:
        assert f"\n{name}" in "\n" + text or f"# TYPE {name.removesuffix('_total')}" in text, name


async def test_metrics_after_a_request(client: httpx.AsyncClient) -> None:
    await client.post("/v1/chat/completions", json=chat_body(stream=True))
    text = (await client.get("/metrics")).text
    assert f'flashbox_requests_total{{api="openai",code="200",model="{MODEL}"}} 1.0' in text
    assert f'flashbox_ttft_seconds_count{{api="openai",model="{MODEL}"}} 1.0' in text
    assert f'flashbox_generated_tokens_total{{model="{MODEL}"}} 5.0' in text
    assert f'flashbox_cached_tokens_total{{model="{MODEL}"}} 5.0' in text
    assert 'flashbox_ttft_stage_seconds_count{stage="first_content_token"} 1.0' in text
    assert 'flashbox_ttft_stage_seconds_count{stage="first_reasoning_token"} 1.0' in text
    assert 'flashbox_replica_up{replica="engine-a:30000"} 1.0' in text
    assert "flashbox_requests_in_flight 0.0" in text
    assert 'flashbox_affinity_total{lineage="main",outcome="new"} 1.0' in text


async def test_metrics_are_per_app(engine: FakeEngine) -> None:
    async with gateway_client(engine) as first:
        await first.post("/v1/chat/completions", json=chat_body())
    async with gateway_client(engine) as second:
        text = (await second.get("/metrics")).text
    assert 'flashbox_requests_total{api="openai",code="200"' not in text


async def test_unexpected_failure_is_openai_500_with_request_id(engine: FakeEngine) -> None:
    async with gateway_client(engine) as client:
        transport = client._transport
        assert isinstance(transport, httpx.ASGITransport)
        state = transport.app.state.flashbox  # type: ignore[attr-defined]

        class Broken:
            name = "broken"

            def render(self, *args: object) -> str:
                raise RuntimeError("bug")

        state.renderer = Broken()
        response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert response.headers["x-request-id"]
    assert state.in_flight == 0
