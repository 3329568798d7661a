"""GET /sim/timings: each request's engine-side TTFT, found by its rid, on both APIs."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import orjson

from tests.support.procs import Proc


def _timing(sim: Proc, rid: str) -> dict[str, Any]:
    body = httpx.get(sim.url + "/sim/timings", timeout=10.0).json()
    assert body["clock"] == "time.perf_counter"
    found = [t for t in body["requests"] if t["rid"] == rid]
    assert len(found) == 1, f"{rid} not in /sim/timings"
    timing: dict[str, Any] = found[0]
    return timing


def test_generate_request_is_timed_under_its_rid(sim: Proc) -> None:
    rid = f"timed-{uuid.uuid4().hex}"
    before = time.perf_counter()
    response = httpx.post(
        sim.url + "/generate",
        json={"text": "hello there", "rid": rid, "sampling_params": {"max_new_tokens": 4}},
        timeout=30.0,
    )
    after = time.perf_counter()
    assert response.status_code == 200
    timing = _timing(sim, rid)
    # perf_counter is the system's monotonic clock: the same timeline as this process's.
    assert before <= timing["arrival_s"] <= timing["first_token_s"] <= after
    # The modelled TTFT is the reference host's (hardware seconds), as meta_info.sim reports.
    modelled = response.json()["meta_info"]["sim"]["ttft_s"]
    assert abs(timing["model_ttft_s"] - modelled) < 1e-5


def test_openai_request_takes_its_rid_from_x_request_id(sim: Proc) -> None:
    # A router in front forwards x-request-id; the body's `rid` (SGLang's extension) wins.
    header_rid = f"hdr-{uuid.uuid4().hex}"
    body = {
        "model": "glm-5.3-flash",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "stream": True,
    }
    with httpx.stream(
        "POST",
        sim.url + "/v1/chat/completions",
        json=body,
        headers={"x-request-id": header_rid},
        timeout=30.0,
    ) as response:
        events = [line for line in response.iter_lines() if line.startswith("data: {")]
    first = events[0]
    assert orjson.loads(first[6:])["id"] == f"chatcmpl-{header_rid}"
    assert _timing(sim, header_rid)["model_ttft_s"] > 0

    body_rid = f"body-{uuid.uuid4().hex}"
    reply = httpx.post(
        sim.url + "/v1/chat/completions",
        json={**body, "stream": False, "rid": body_rid},
        headers={"x-request-id": "ignored-" + body_rid},
        timeout=30.0,
    )
    assert reply.json()["id"] == f"chatcmpl-{body_rid}"
    timing = _timing(sim, body_rid)
    assert timing["first_token_s"] > 0
    assert timing["request_id"] == "ignored-" + body_rid  # the header, kept for tracing


def test_generate_records_the_x_request_id_it_came_with(sim: Proc) -> None:
    # flashbox's gateway sends its own rid and the client's id as the header.
    rid, client_id = uuid.uuid4().hex, f"client-{uuid.uuid4().hex}"
    body = {"text": "hi", "rid": rid, "sampling_params": {"max_new_tokens": 2}}
    response = httpx.post(
        sim.url + "/generate", json=body, headers={"x-request-id": client_id}, timeout=30.0
    )
    assert response.status_code == 200
    timing = _timing(sim, rid)
    assert timing["request_id"] == client_id
    # Without the header, the rid stands in.
    other = uuid.uuid4().hex
    httpx.post(sim.url + "/generate", json={**body, "rid": other}, timeout=30.0)
    assert _timing(sim, other)["request_id"] == other
