"""A client that leaves in any phase costs the engine an abort_request (the sim counts aborts)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import GATEWAY_ENV, MODEL, client_for, metric_sum, sim_body, wait_for
from tests.support.idle import check_idle
from tests.support.procs import Proc, start_gateway, start_sim

ABORTS = "sglang:num_aborted_requests_total"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "x"}]


def gateway_aborts(gateway: Proc, phase: str) -> float:
    return metric_sum(gateway, "flashbox_upstream_aborts_total", {"phase": phase})


def test_before_first_token(sim: Proc, gateway: Proc, client: openai.OpenAI) -> None:
    before = metric_sum(sim, ABORTS)
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, extra_body=sim_body(fault="stall_first")
    )
    # create() returns with the response's headers; the role chunk comes with the first
    # output (as SGLang sends it), which this engine holds back.
    assert stream.response.status_code == 200
    time.sleep(0.3)
    assert metric_sum(sim, ABORTS) == before  # nothing is aborted while the client stays
    stream.close()
    assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
    assert wait_for(lambda: gateway_aborts(gateway, "before_first_token") >= 1)


def test_while_streaming(sim: Proc, gateway: Proc, client: openai.OpenAI) -> None:
    before = metric_sum(sim, ABORTS)
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, extra_body=sim_body(fault="stall:4")
    )
    seen = 0
    for chunk in stream:
        if chunk.choices and (
            chunk.choices[0].delta.content
            or getattr(chunk.choices[0].delta, "reasoning_content", None)
        ):
            seen += 1
            break
    assert seen
    stream.close()
    assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
    assert wait_for(lambda: gateway_aborts(gateway, "streaming") >= 1)


def test_non_streaming(sim: Proc, gateway: Proc) -> None:
    before = metric_sum(sim, ABORTS)
    with client_for(gateway, timeout=1.0) as impatient, pytest.raises(openai.APITimeoutError):
        impatient.chat.completions.create(
            model=MODEL, messages=MESSAGES, extra_body=sim_body(fault="stall_first")
        )
    assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
    assert wait_for(lambda: gateway_aborts(gateway, "non_streaming") >= 1)


@pytest.fixture(scope="module")
def busy_sim() -> Iterator[Proc]:
    """A simulator that runs one request at a time, so a second one waits."""
    # Slow enough (time scale 0.05) that one long answer keeps the only slot busy.
    sim = start_sim("--max-running-requests", "1", name="one-slot", time_scale=0.05)
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def busy_pair(busy_sim: Proc) -> Iterator[tuple[Proc, Proc]]:
    """The busy simulator behind a gateway without its fair queue (docs/fairness.md), so the
    second request waits in the engine's own queue, as behind several gateways."""
    env = {**GATEWAY_ENV, "FLASHBOX_FAIRNESS__ENABLED": "false"}
    gateway = start_gateway([busy_sim.url], env=env)
    try:
        yield busy_sim, gateway
    finally:
        gateway.stop()


def _hold_the_only_slot(client: openai.OpenAI) -> openai.Stream[Any]:
    """A long answer on the only running slot, cut short by leaving."""
    holder = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        stream=True,
        max_tokens=20000,
        extra_body=sim_body(reasoning_tokens=0, content_tokens=20000),
    )
    chunks = iter(holder)
    next(chunks)
    next(chunks)
    return holder


def test_while_waiting_in_the_gateway_queue(busy_sim: Proc) -> None:
    """With the fair queue (the default) the second request waits in the gateway: leaving
    there gives its place up and costs the engine nothing; its stream had started."""
    gateway = start_gateway([busy_sim.url], env=GATEWAY_ENV)
    try:
        before = metric_sum(busy_sim, ABORTS)
        with client_for(gateway) as client:
            holder = _hold_the_only_slot(client)
            body = {"model": MODEL, "messages": MESSAGES, "stream": True}
            with (
                httpx.Client(timeout=30) as http,
                http.stream("POST", gateway.url + "/v1/chat/completions", json=body) as response,
            ):
                assert response.status_code == 200  # answered at once, while it waits
                assert wait_for(lambda: metric_sum(gateway, "flashbox_fair_queue_waiting") >= 1)
                assert metric_sum(busy_sim, "sglang:num_queue_reqs") == 0
            assert wait_for(lambda: metric_sum(gateway, "flashbox_fair_queue_waiting") == 0)
            time.sleep(0.3)
            assert metric_sum(busy_sim, ABORTS) == before  # it never reached the engine
            assert gateway_aborts(gateway, "queued") == 0
            holder.close()
            assert wait_for(lambda: metric_sum(busy_sim, ABORTS) >= before + 1)
    finally:
        gateway.stop()


def test_while_waiting_in_the_engine_queue(busy_pair: tuple[Proc, Proc]) -> None:
    sim, gateway = busy_pair
    before = metric_sum(sim, ABORTS)
    with client_for(gateway) as client:
        holder = _hold_the_only_slot(client)
        body = {"model": MODEL, "messages": MESSAGES, "stream": True}
        with (
            httpx.Client(timeout=30) as http,
            http.stream("POST", gateway.url + "/v1/chat/completions", json=body) as response,
        ):
            assert response.status_code == 200  # the headers: the engine took the request
            assert wait_for(lambda: metric_sum(sim, "sglang:num_queue_reqs") >= 1)
        # Leaving closed the connection while the request waited in the engine's queue.
        assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
        holder.close()
        assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 2)


def test_a_client_chosen_id_cannot_abort_another_request(
    sim: Proc, gateway: Proc, client: openai.OpenAI
) -> None:
    """SGLang aborts by rid prefix (the simulator too): the client ids "a" and "ab" must not
    become rids, or the first client's leaving would abort the second's generation."""
    before = metric_sum(sim, ABORTS)
    leaving = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        stream=True,
        extra_body=sim_body(fault="stall_first"),
        extra_headers={"x-request-id": "a"},
    )
    # create() returned with the headers: its generation is live, before its first token.
    assert leaving.response.status_code == 200
    staying = client.chat.completions.with_streaming_response.create(
        model=MODEL,
        messages=MESSAGES,
        stream=True,
        extra_body=sim_body(fault="stall:2"),  # live on the engine until aborted
        extra_headers={"x-request-id": "ab"},
    )
    with staying as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        leaving.close()
        assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
        time.sleep(0.3)
        assert metric_sum(sim, ABORTS) == before + 1  # only the request that left
    assert response.headers["x-request-id"] == "ab"


def test_clients_that_leave_before_the_first_event_give_their_connections_back(
    sim: Proc,
) -> None:
    """The outage #38 found: a streamed request whose client left while the gateway waited for
    the engine's first event (upstream.refusal_wait_s) kept its engine connection. With four
    connections, four such requests and every later one got 503 "All connections to the
    engine are busy"."""
    env = {
        **GATEWAY_ENV,
        "FLASHBOX_UPSTREAM__MAX_CONNECTIONS": "4",
        "FLASHBOX_UPSTREAM__POOL_TIMEOUT_S": "2",
        # Long enough that each client below leaves inside the wait.
        "FLASHBOX_UPSTREAM__REFUSAL_WAIT_S": "2",
    }
    gateway = start_gateway([sim.url], env=env)
    try:
        body = {
            "model": MODEL, "messages": MESSAGES, "stream": True,
            **sim_body(fault="stall_first"),
        }  # fmt: skip
        with httpx.Client(timeout=10) as http:
            for _ in range(6):
                # The headers come only after the wait: leave at 0.3 s, inside it.
                with pytest.raises(httpx.ReadTimeout):
                    http.post(
                        gateway.url + "/v1/chat/completions",
                        json=body,
                        timeout=httpx.Timeout(10, read=0.3),
                    )
        assert wait_for(lambda: gateway_aborts(gateway, "queued") >= 6)
        check_idle(gateway)
        with client_for(gateway) as client:
            answer = client.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert answer.choices[0].message.content
    finally:
        gateway.stop()


def test_the_gateway_is_idle_after_every_disconnect(sim: Proc, gateway: Proc) -> None:
    """After the module's disconnects (every phase above), nothing is held: engine
    connections, in-flight requests, queues, routing's picks and trials."""
    check_idle(gateway)
