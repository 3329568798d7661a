"""bench.relay_cost: the relay, fed SGLang-shaped chunks, streams the whole answer."""

from __future__ import annotations

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
