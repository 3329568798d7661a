"""bench.relay_cost: the relay, fed SGLang-shaped chunks, streams the whole answer."""

from __future__ import annotations

from typing import Any

import orjson

from bench.relay_cost import measure

WORDS = ("on ", "with ", "the ", "model ", "token ", "and ")


def test_the_answer_is_relayed_whole_and_timed() -> None:
    sent: list[bytes] = []
    result = measure(tokens=16, rounds=1, sink=sent)
    assert result["tokens"] == 16
    assert 0 < result["best_us_per_event"] <= result["median_us_per_event"]
    events = [line[6:] for chunk in sent for line in chunk.split(b"\n\n") if line]
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    # Tokens 0-3 think, token 4 closes the thought, 5-15 answer (bench.relay_cost.engine_chunks).
    assert reasoning.strip() == "".join(WORDS[i % 6] for i in range(4)).strip()
    assert content.strip() == "".join(WORDS[i % 6] for i in range(5, 16)).strip()
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == 16


def test_the_messages_face_relays_the_same_answer_and_is_compared() -> None:
    sent: list[bytes] = []
    result = measure(tokens=16, rounds=2, messages_sink=sent)
    assert 0 < result["messages_best_us_per_event"] <= result["messages_median_us_per_event"]
    assert result["messages_over_openai_median"] > 0
    frames = [frame for chunk in sent for frame in chunk.split(b"\n\n") if frame]
    events = [orjson.loads(frame.split(b"\ndata: ", 1)[1]) for frame in frames]
    answers: list[list[dict[str, Any]]] = []
    for event in events:
        if event["type"] == "message_start":
            answers.append([])
        if event["type"] != "ping":
            answers[-1].append(event)
    assert len(answers) == 2  # one per round
    for answer in answers:
        assert [e["type"] for e in answer][-2:] == ["message_delta", "message_stop"]
        deltas = [e["delta"] for e in answer if e["type"] == "content_block_delta"]
        thinking = "".join(d.get("thinking") or "" for d in deltas)
        text = "".join(d.get("text") or "" for d in deltas)
        # The same answer as the OpenAI face's (bench.relay_cost.engine_chunks).
        assert thinking.strip() == "".join(WORDS[i % 6] for i in range(4)).strip()
        assert text.strip() == "".join(WORDS[i % 6] for i in range(5, 16)).strip()
        signatures = [d["signature"] for d in deltas if d["type"] == "signature_delta"]
        assert len(signatures) == 1
        assert signatures[0].startswith("fbx1.")
        assert answer[-2]["delta"]["stop_reason"] == "end_turn"
        assert answer[-2]["usage"]["output_tokens"] == 16


def test_the_responses_face_relays_the_same_answer_and_is_compared() -> None:
    sent: list[bytes] = []
    result = measure(tokens=16, rounds=2, responses_sink=sent)
    assert 0 < result["responses_best_us_per_event"] <= result["responses_median_us_per_event"]
    assert result["responses_over_openai_median"] > 0
    assert result["responses_over_openai_best"] > 0
    frames = [frame for chunk in sent for frame in chunk.split(b"\n\n") if frame]
    answers: list[list[dict[str, Any]]] = []
    for frame in frames:
        head, data = frame.split(b"\ndata: ", 1)
        event = orjson.loads(data)
        assert head == b"event: " + event["type"].encode()
        if event["type"] == "response.created":
            answers.append([])
        answers[-1].append(event)
    assert len(answers) == 2  # one per round
    for answer in answers:
        numbers = [e["sequence_number"] for e in answer]
        assert numbers == sorted(set(numbers))
        assert answer[-1]["type"] == "response.completed"
        reasoning = "".join(
            e["delta"] for e in answer if e["type"] == "response.reasoning_text.delta"
        )
        text = "".join(e["delta"] for e in answer if e["type"] == "response.output_text.delta")
        # The same answer as the OpenAI face's (bench.relay_cost.engine_chunks).
        assert reasoning.strip() == "".join(WORDS[i % 6] for i in range(4)).strip()
        assert text.strip() == "".join(WORDS[i % 6] for i in range(5, 16)).strip()
        response = answer[-1]["response"]
        assert response["id"] == "resp_bench"
        assert [item["type"] for item in response["output"]] == ["reasoning", "message"]
        assert response["output"][0]["encrypted_content"]
        assert response["usage"]["output_tokens"] == 16
