"""bench.overhead's tables: each other face next to the OpenAI face, and the request bodies."""

from __future__ import annotations

import argparse

import pytest

from bench.overhead import LevelResult, _body, _faces, face_table, face_tables


def _result(target: str, streams: int, ttft: float, network: float, cpu_s: float) -> LevelResult:
    return LevelResult(
        target=target,
        concurrency=streams,
        requests=10,
        ok=10,
        ttft_p50_ms=ttft,
        ttft_p99_ms=ttft,
        tokens=1000,
        wall_s=1.0,
        cpu_s=cpu_s,
        network_p50_ms=network,
        network_p99_ms=network,
    )


def _results() -> list[LevelResult]:
    return [
        _result("direct", 1, 10.0, 1.0, 0.0),
        _result("gateway", 1, 11.0, 2.0, 0.1),
        _result("messages", 1, 11.2, 2.1, 0.11),
        _result("responses", 1, 11.9, 2.9, 0.15),
    ]


def test_each_other_face_is_compared_with_the_openai_face() -> None:
    results = _results()
    messages = face_table(results)  # the Messages face, as before
    assert messages == face_table(results, "anthropic")
    assert "OpenAI / Messages" in messages
    assert "At 1 stream: added TTFT p50 Messages - OpenAI +0.20 ms" in messages
    responses = face_table(results, "responses")
    assert "| 1 | +1.00 / +1.90 | +0.90 | 1.90 | +1.00 / +1.90 | +0.90 | 1.90 " in responses
    assert "| 100.0 / 150.0 | 1.50 | 10.00 / 15.00 |" in responses
    assert "At 1 stream: added TTFT p50 Responses - OpenAI +0.90 ms" in responses
    assert "CPU per relayed token 1.50x (goal <= 1.2x)" in responses
    both = face_tables(results, " (same gateway process)")
    assert both.index("The Messages face next to the OpenAI face (same gateway") < both.index(
        "The Responses face next to the OpenAI face (same gateway"
    )


def test_a_face_not_measured_has_no_table() -> None:
    results = [r for r in _results() if r.target != "messages"]
    assert face_table(results, "anthropic") == ""
    assert face_table(results, "openai") == ""
    assert face_tables(results).startswith("The Responses face next to the OpenAI face:")


def test_every_face_sends_the_same_prompt_and_output_bound() -> None:
    chat, responses = _body("openai"), _body("responses")
    assert set(responses) == {"model", "input", "max_output_tokens"}
    assert responses["max_output_tokens"] == chat["max_tokens"]
    assert responses["input"].split(":")[1] == chat["messages"][0]["content"].split(":")[1]


def test_faces_option() -> None:
    assert _faces("responses,openai") == ("openai", "responses")
    with pytest.raises(argparse.ArgumentTypeError):
        _faces("openai,grpc")
