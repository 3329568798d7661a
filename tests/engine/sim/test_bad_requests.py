"""Client mistakes get 4xx JSON errors that say what to fix; the simulator stays healthy."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.procs import Proc, start_sim

CASES: list[tuple[str, Any]] = [
    ("not json", b"{text: nope"),
    ("empty body", b""),
    ("array body", b"[1, 2]"),
    ("missing text", {"sampling_params": {"max_new_tokens": 4}}),
    ("both prompts", {"text": "a", "input_ids": [1]}),
    ("text wrong type", {"text": 5}),
    ("empty text", {"text": ""}),
    ("batch text", {"text": ["a", "b"]}),
    ("ids wrong type", {"input_ids": ["a"]}),
    ("empty ids", {"input_ids": []}),
    ("negative max_new_tokens", {"text": "a", "sampling_params": {"max_new_tokens": -1}}),
    ("max_new_tokens string", {"text": "a", "sampling_params": {"max_new_tokens": "5"}}),
    ("max_new_tokens bool", {"text": "a", "sampling_params": {"max_new_tokens": True}}),
    ("sampling_params list", {"text": "a", "sampling_params": [1]}),
    ("temperature string", {"text": "a", "sampling_params": {"temperature": "hot"}}),
    ("stop wrong type", {"text": "a", "sampling_params": {"stop": 3}}),
    ("stop ids wrong type", {"text": "a", "sampling_params": {"stop_token_ids": "1"}}),
    ("seed float", {"text": "a", "sampling_params": {"sampling_seed": 1.5}}),
    ("n > 1", {"text": "a", "sampling_params": {"n": 2}}),
    ("stream string", {"text": "a", "stream": "yes"}),
    ("rid number", {"text": "a", "rid": 7}),
    ("custom_params list", {"text": "a", "custom_params": [1]}),
    ("sim knob negative", {"text": "a", "custom_params": {"sim": {"tool_calls": -1}}}),
]


@pytest.mark.parametrize(("case", "body"), CASES, ids=[c for c, _ in CASES])
def test_bad_generate_requests_are_400(sim: Proc, case: str, body: Any) -> None:
    content = body if isinstance(body, bytes) else None
    payload = None if isinstance(body, bytes) else body
    response = httpx.post(sim.url + "/generate", content=content, json=payload, timeout=10)
    assert response.status_code == 400, (case, response.text)
    error = response.json()["error"]
    assert error["message"]
    assert error["type"] == "invalid_request_error"


def test_bad_abort_and_unknown_route(sim: Proc) -> None:
    assert httpx.post(sim.url + "/abort_request", content=b"nope").status_code == 400
    assert httpx.post(sim.url + "/abort_request", json={"rid": 3}).status_code == 400
    missing = httpx.get(sim.url + "/nowhere")
    assert missing.status_code == 404
    assert "error" in missing.json()
    assert httpx.get(sim.url + "/generate").status_code == 405


def test_duplicate_live_rid_is_rejected(sim: Proc) -> None:
    long = {
        "text": "a",
        "rid": "dup",
        "stream": True,
        "sampling_params": {"max_new_tokens": 100_000, "ignore_eos": True},
    }
    with httpx.stream("POST", sim.url + "/generate", json=long, timeout=10) as first:
        lines = first.iter_lines()  # keep a reference: a collected iterator closes the stream
        next(lines)
        second = httpx.post(sim.url + "/generate", json={"text": "b", "rid": "dup"}, timeout=10)
        assert second.status_code == 400
        assert "rid" in second.json()["error"]["message"]
    httpx.post(sim.url + "/abort_request", json={"rid": "dup"})


def test_healthy_after_bad_requests(sim: Proc) -> None:
    assert httpx.get(sim.url + "/health").status_code == 200
    ok = httpx.post(
        sim.url + "/generate", json={"text": "a", "sampling_params": {"max_new_tokens": 2}}
    )
    assert ok.status_code == 200


def test_body_and_context_bounds() -> None:
    proc = start_sim("--max-body-bytes", "1000", "--context-length", "100", name="bounded")
    try:
        big = httpx.post(proc.url + "/generate", json={"text": "x" * 2000}, timeout=10)
        assert big.status_code == 413
        long = httpx.post(proc.url + "/generate", json={"text": "x" * 400}, timeout=10)
        assert long.status_code == 400
        assert "context length" in long.json()["error"]["message"]
        assert httpx.get(proc.url + "/health").status_code == 200
    finally:
        proc.stop()
