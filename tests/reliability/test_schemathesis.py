"""Property-based hostile input from the gateway's own OpenAPI schema, against a real process.

schemathesis generates valid and invalid requests for every operation (the chat body is the
real ChatCompletionRequest model, see gateway.app); checks: never a 5xx, responses match the
documented status codes and schemas. A bounded number of examples by default; many more under
`-m slow`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import BaseSchema, Case, GenerationMode
from schemathesis.core.result import Ok

from tests.reliability.conftest import assert_healthy, gateway_env
from tests.support.procs import Proc, start_gateway, start_sim

FAST_EXAMPLES = 25
SLOW_EXAMPLES = 500


@pytest.fixture(scope="module")
def target() -> Iterator[Proc]:
    sim = start_sim(name="st")
    # Small bounds keep generated requests cheap for the simulator and the gateway.
    gateway = start_gateway(
        [sim.url],
        env=gateway_env(FLASHBOX_LIMITS__MAX_TOKENS="64", FLASHBOX_LIMITS__DEFAULT_MAX_TOKENS="8"),
    )
    try:
        yield gateway
    finally:
        gateway.stop()
        sim.stop()


@pytest.fixture(scope="module")
def api_schema(target: Proc) -> BaseSchema:
    return schemathesis.openapi.from_url(target.url + "/openapi.json")


def _call(case: Case[Any], target: Proc) -> None:
    response = case.call(base_url=target.url, timeout=60)
    assert response.status_code < 500, (case.as_curl_command(), response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["message"], str), error
        assert len(error["message"]) > 10, error


def _fuzz(schema: BaseSchema, target: Proc, examples: int) -> int:
    """Valid and invalid cases for every operation; returns how many were sent."""
    sent = 0
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=examples,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
                database=None,
            )
            def run(case: Case[Any]) -> None:
                nonlocal sent
                sent += 1
                _call(case, target)

            try:
                run()
            except Unsatisfiable:
                # An operation with no inputs (GET /health) has no invalid form.
                assert mode is GenerationMode.NEGATIVE
    return sent


def test_api_fuzz(api_schema: BaseSchema, target: Proc) -> None:
    assert _fuzz(api_schema, target, FAST_EXAMPLES) > 0


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_api_fuzz_long(api_schema: BaseSchema, target: Proc) -> None:
    assert _fuzz(api_schema, target, SLOW_EXAMPLES) > 0


def test_schema_describes_the_chat_body(target: Proc) -> None:
    document = httpx.get(target.url + "/openapi.json", timeout=10).json()
    body = document["paths"]["/v1/chat/completions"]["post"]["requestBody"]
    ref = body["content"]["application/json"]["schema"]["$ref"]
    model = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert {"model", "messages", "tools", "stream"} <= set(model["properties"])


def test_healthy_after(target: Proc) -> None:
    assert_healthy(target)
