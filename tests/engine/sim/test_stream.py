"""The /generate wire format, against a real simulator process on loopback."""

from __future__ import annotations

import itertools
from typing import Any

import httpx

from tests.engine.sim.helpers import GLM_PROMPT, generate, sse_events, stream
from tests.support.procs import Proc, start_sim


def _token_events(events: list[Any]) -> list[dict[str, Any]]:
    assert events[-1] == "[DONE]"
    assert all(isinstance(e, dict) for e in events[:-1])
    return events[:-1]


def test_stream_is_cumulative_with_meta_info_on_every_event(sim: Proc) -> None:
    events = _token_events(
        stream(
            sim.url,
            {"text": GLM_PROMPT, "rid": "fmt-1", "sampling_params": {"max_new_tokens": 400}},
        )
    )
    assert len(events) > 10
    previous = ""
    for i, event in enumerate(events, start=1):
        assert set(event) == {"text", "output_ids", "meta_info"}
        meta = event["meta_info"]
        assert meta["id"] == "fmt-1"
        assert meta["completion_tokens"] == i == len(event["output_ids"])
        assert meta["prompt_tokens"] == -(-len(GLM_PROMPT.encode()) // 4)
        assert meta["cached_tokens"] >= 0
        assert event["text"].startswith(previous)
        previous = event["text"]
        if i < len(events):
            assert meta["finish_reason"] is None
            assert "e2e_latency" not in meta
    last = events[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "stop", "matched": 154820}
    assert last["e2e_latency"] > 0
    # GLM format after the generation prompt's <think>: reasoning, </think>, content.
    reasoning, sep, content = previous.partition("</think>")
    assert sep
    assert reasoning.strip()
    assert content.strip()


def test_tags_are_split_across_events(sim: Proc) -> None:
    events = _token_events(
        stream(sim.url, {"text": GLM_PROMPT, "sampling_params": {"max_new_tokens": 400}})
    )
    deltas = [b["text"][len(a["text"]) :] for a, b in itertools.pairwise(events)]
    # The output is cut as one text (as a prompt is), so the tag spans at least two events.
    text = "".join(deltas)
    start = text.index("</think>")
    ends = set(itertools.accumulate(len(d) for d in deltas))
    assert any(start < end < start + len("</think>") for end in ends)


def test_length_finish_and_non_streaming_shape(sim: Proc) -> None:
    response = generate(sim.url, {"text": GLM_PROMPT, "sampling_params": {"max_new_tokens": 5}})
    assert response.status_code == 200
    body = response.json()
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert body["meta_info"]["completion_tokens"] == 5 == len(body["output_ids"])
    assert body["meta_info"]["e2e_latency"] >= 0
    assert body["meta_info"]["sim"]["ttft_s"] > 0


def test_same_seed_same_output_and_other_seed_differs(sim: Proc) -> None:
    def text(seed: int) -> str:
        body = {
            "text": GLM_PROMPT,
            "sampling_params": {"max_new_tokens": 60, "sampling_seed": seed},
        }
        result: str = generate(sim.url, body).json()["text"]
        return result

    assert text(7) == text(7)
    assert text(7) != text(8)


def test_streaming_equals_non_streaming(sim: Proc) -> None:
    body = {"text": GLM_PROMPT, "sampling_params": {"max_new_tokens": 300, "sampling_seed": 3}}
    one_shot = generate(sim.url, body).json()
    streamed = _token_events(stream(sim.url, body))[-1]
    assert streamed["text"] == one_shot["text"]
    assert streamed["output_ids"] == one_shot["output_ids"]


def test_stop_string_is_trimmed_and_never_shrinks_text(sim: Proc) -> None:
    body: dict[str, Any] = {
        "text": "plain prompt",
        "sampling_params": {"max_new_tokens": 100, "stop": ["STOP"]},
        "custom_params": {"sim": {"output": "one two STOP three"}},
    }
    events = _token_events(stream(sim.url, body))
    texts = [e["text"] for e in events]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))
    assert texts[-1] == "one two "
    assert events[-1]["meta_info"]["finish_reason"] == {"type": "stop", "matched": "STOP"}
    kept = generate(sim.url, {**body, "sampling_params": {"stop": "STOP", "no_stop_trim": True}})
    assert kept.json()["text"] == "one two STOP"


def test_stop_token_ids_and_ignore_eos(sim: Proc) -> None:
    eos = 154820
    stopped = generate(
        sim.url,
        {
            "text": "p",
            "sampling_params": {"stop_token_ids": [eos], "max_new_tokens": 50},
            "custom_params": {"sim": {"output": "abcd"}},
        },
    ).json()
    assert stopped["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}
    assert stopped["text"] == "abcd"
    endless = generate(
        sim.url,
        {
            "text": "p",
            "sampling_params": {"ignore_eos": True, "max_new_tokens": 50},
            "custom_params": {"sim": {"output": "abcd"}},
        },
    ).json()
    assert endless["meta_info"]["finish_reason"] == {"type": "length", "length": 50}
    assert endless["text"].startswith("abcd")
    assert len(endless["text"]) > 4


def test_input_ids_prompt(sim: Proc) -> None:
    body = generate(
        sim.url, {"input_ids": [1, 2, 3, 4, 5], "sampling_params": {"max_new_tokens": 3}}
    )
    assert body.status_code == 200
    assert body.json()["meta_info"]["prompt_tokens"] == 5


def test_zero_max_new_tokens(sim: Proc) -> None:
    body = generate(sim.url, {"text": "p", "sampling_params": {"max_new_tokens": 0}}).json()
    assert body["text"] == ""
    assert body["meta_info"]["completion_tokens"] == 0
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 0}


def test_info_endpoints(sim: Proc) -> None:
    info = httpx.get(sim.url + "/server_info").json()
    assert info["max_mamba_cache_size"] == 192
    assert info["mamba_track_interval"] == 256
    assert info["sim_name"] == "shared"
    models = httpx.get(sim.url + "/v1/models").json()
    assert models["data"][0]["id"] == info["served_model_name"]
    assert httpx.get(sim.url + "/model_info").json()["is_generation"] is True
    assert httpx.get(sim.url + "/health_generate", timeout=30).status_code == 200
    metrics = httpx.get(sim.url + "/metrics").text
    for name in (
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_bucket",
        "sglang:e2e_request_latency_seconds_bucket",
        "sglang:queue_time_seconds_bucket",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:cached_tokens_total",
        "sglang:cache_hit_rate",
        "sglang:mamba_usage",
        "sglang:token_usage",
        "sglang:gen_throughput",
        "sglang:num_requests_total",
        "sglang:num_aborted_requests_total",
    ):
        assert any(
            line.startswith(name + "{") and 'model_name="glm-5.3-flash"' in line
            for line in metrics.splitlines()
        ), name


def test_sse_helper_rejects_non_data_lines() -> None:
    assert sse_events('data: {"a": 1}\n\ndata: [DONE]\n\n') == [{"a": 1}, "[DONE]"]


def test_stream_output_sends_each_id_once() -> None:
    """With --stream-output (as the engine is launched) output_ids come as disjoint segments,
    text stays cumulative, and a non-streamed answer still has every id."""
    sim = start_sim("--stream-output", name="segments")
    try:
        body = {"text": GLM_PROMPT, "rid": "seg-1", "sampling_params": {"max_new_tokens": 60}}
        events = _token_events(stream(sim.url, body))
        ids = [i for event in events for i in event["output_ids"]]
        assert len(ids) == events[-1]["meta_info"]["completion_tokens"]
        assert any(len(event["output_ids"]) == 1 for event in events)
        assert all(b["text"].startswith(a["text"]) for a, b in itertools.pairwise(events))
        whole = generate(sim.url, {**body, "rid": "seg-2"}).json()
        assert whole["output_ids"] == ids  # same seed, same output
    finally:
        sim.stop()
