from __future__ import annotations

import random

import orjson

from engine.sim.requests import parse_generate
from engine.sim.state import SimRequest
from engine.sim.tokens import from_text


def test_fast_event_encoding_equals_the_generic_one() -> None:
    params = parse_generate({"text": "prompt", "rid": 'r"1'})
    req = SimRequest(
        params=params, prompt=from_text("prompt", 4), plan=[], rng=random.Random(0), fault=None
    )
    req.cached_tokens = 3
    for i, piece in enumerate(["ab", 'c"d', "é\n", ""]):
        req.add_token(1000 + i, piece)
        req.visible.append(len(req.text))
    for tokens in range(5):
        encoded = req.encode_event(tokens)
        assert encoded.startswith(b"data: ")
        assert encoded.endswith(b"\n\n")
        assert orjson.loads(encoded[6:]) == req.event(tokens, False, 1.0)


def test_stream_output_events_carry_only_the_new_ids() -> None:
    """SGLang's --stream-output: each event's output_ids start where the last one's ended."""
    params = parse_generate({"text": "prompt", "rid": "r"})
    req = SimRequest(
        params=params, prompt=from_text("prompt", 4), plan=[], rng=random.Random(0), fault=None
    )
    for i, piece in enumerate(["ab", "cd", "ef", "gh"]):
        req.add_token(7 + i * 11, piece)
        req.visible.append(len(req.text))
    for since, tokens in [(0, 1), (1, 3), (3, 4), (4, 4)]:
        encoded = orjson.loads(req.encode_event(tokens, since)[6:])
        assert encoded == req.event(tokens, False, 1.0, since)
        assert encoded["output_ids"] == req.ids[since:tokens]
        assert encoded["text"] == req.text[: req.visible[tokens - 1]]  # still cumulative
