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


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("top_k 0", {"top_k": 0, "temperature": 1}, "top_k must be -1 (disable) or at least 1"),
    ("top_p 0", {"top_p": 0}, "top_p must be in (0, 1]"),
    ("min_p 2", {"min_p": 2}, "min_p must be in [0, 1]"),
    ("negative temperature", {"temperature": -1}, "temperature must be non-negative"),
    ("repetition 3", {"repetition_penalty": 3}, "repetition_penalty must be in [0, 2]"),
]


@pytest.mark.parametrize(("case", "sampling", "words"), REFUSED, ids=[c for c, _, _ in REFUSED])
def test_refusals_are_sglang_kts_in_both_forms(
    sim: Proc, case: str, sampling: dict[str, Any], words: str
) -> None:
    """As sglang-kt 0.7.2 answers what SamplingParams.verify rejects (the real server showed
    it): unstreamed a 400 with the message alone; streamed a 200 whose one event is the
    error, then [DONE] (docs/simulator.md, "Wire diff")."""
    body = {"text": "a", "sampling_params": {"max_new_tokens": 4, **sampling}}
    plain = httpx.post(sim.url + "/generate", json=body, timeout=10)
    assert plain.status_code == 400, (case, plain.text)
    assert plain.json() == {"error": {"message": plain.json()["error"]["message"]}}
    assert words in plain.json()["error"]["message"]
    streamed = httpx.post(sim.url + "/generate", json={**body, "stream": True}, timeout=10)
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = [e for e in streamed.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert len(events) == 2
    assert words in events[0]


def test_temperature_0_is_greedy_before_top_k_is_checked(sim: Proc) -> None:
    body = {"text": "a", "sampling_params": {"max_new_tokens": 2, "temperature": 0, "top_k": 0}}
    assert httpx.post(sim.url + "/generate", json=body, timeout=10).status_code == 200
