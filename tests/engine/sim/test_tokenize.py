"""POST /tokenize and /v1/tokenize: SGLang's fields, and the count /generate reports."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.engine.sim.helpers import GLM_PROMPT, generate
from tests.support.procs import Proc

PROMPTS = [
    GLM_PROMPT,
    "a",
    "abcd" * 300,
    # Multi-byte characters: a token boundary can fall inside one.
    "[gMASK]<sop><|user|>héllo wörld, 你好, こんにちは 🙂🚀<|assistant|><think>",
    "é" * 7,
]


def _tokenize(url: str, body: Any, path: str = "/tokenize") -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=10)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_count_is_generates_prompt_tokens(sim: Proc, prompt: str) -> None:
    answer = _tokenize(sim.url, {"prompt": prompt, "add_special_tokens": False})
    assert answer.status_code == 200, answer.text
    counted = answer.json()
    made = generate(sim.url, {"text": prompt, "sampling_params": {"max_new_tokens": 1}})
    assert made.status_code == 200, made.text
    assert counted["count"] == made.json()["meta_info"]["prompt_tokens"]
    assert len(counted["tokens"]) == counted["count"]
    assert all(isinstance(t, int) for t in counted["tokens"])
    assert isinstance(counted["max_model_len"], int)


def test_both_paths_and_special_tokens_agree(sim: Proc) -> None:
    # The simulator's tokenizer has no special tokens, so the flag cannot change the count.
    answers = [
        _tokenize(sim.url, {"prompt": GLM_PROMPT, **extra}, path).json()
        for path in ("/tokenize", "/v1/tokenize")
        for extra in ({}, {"add_special_tokens": True}, {"add_special_tokens": False})
    ]
    assert all(a == answers[0] for a in answers)


def test_list_prompt_counts_each(sim: Proc) -> None:
    answer = _tokenize(sim.url, {"prompt": PROMPTS, "model": "default"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    singles = [_tokenize(sim.url, {"prompt": p}).json() for p in PROMPTS]
    assert body["count"] == [s["count"] for s in singles]
    assert body["tokens"] == [s["tokens"] for s in singles]


def test_empty_prompt_has_no_tokens(sim: Proc) -> None:
    assert _tokenize(sim.url, {"prompt": ""}).json()["count"] == 0


BAD: list[tuple[str, Any]] = [
    ("not json", b"{prompt: nope"),
    ("empty body", b""),
    ("array body", b"[1]"),
    ("missing prompt", {"add_special_tokens": False}),
    ("prompt number", {"prompt": 5}),
    ("prompt list of numbers", {"prompt": [1, 2]}),
    ("add_special_tokens string", {"prompt": "a", "add_special_tokens": "no"}),
    ("model number", {"prompt": "a", "model": 3}),
]


@pytest.mark.parametrize(("case", "body"), BAD, ids=[c for c, _ in BAD])
def test_bad_tokenize_requests_are_400(sim: Proc, case: str, body: Any) -> None:
    content = body if isinstance(body, bytes) else None
    payload = None if isinstance(body, bytes) else body
    response = httpx.post(sim.url + "/tokenize", content=content, json=payload, timeout=10)
    assert response.status_code == 400, (case, response.text)
    error = response.json()["error"]
    assert error["message"]
    assert error["type"] == "invalid_request_error"
