"""Prompt-head checkpoints in the simulator: the pool's rules and what a client sees."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from engine.sim.checkpoints import CheckpointPool
from engine.sim.perf import PerfModel
from engine.sim.profile import load_profile
from engine.sim.requests import SimRequestError, parse_generate
from engine.sim.tokens import TokenSeq, from_text
from tests.engine.sim.helpers import generate, metric
from tests.support.procs import Proc

INTERVAL = 256
BYTES_PER_TOKEN = 4


def _text(tokens: int, fill: str) -> str:
    """`tokens` tokens of text (4 bytes each) built from `fill`."""
    return (fill * (tokens * BYTES_PER_TOKEN // len(fill) + 1))[: tokens * BYTES_PER_TOKEN]


def _seq(text: str) -> TokenSeq:
    return from_text(text, BYTES_PER_TOKEN)


HEAD = _text(1300, "system prompt and tools. ")  # aligned down: 1280


def test_the_head_is_saved_below_the_prompts_own_checkpoint() -> None:
    pool = CheckpointPool(slots=8, track_interval=INTERVAL)
    first = _seq(HEAD + _text(700, "first session "))  # 2,000 tokens: own checkpoint 1792
    assert pool.head_cut(first, 1300, cached=0) == 1280
    pool.save(first)
    assert pool.save_head(first, 1300, cached=0)
    assert len(pool) == 2
    assert pool.head_count == 1

    second = _seq(HEAD + _text(900, "second session "))
    cached, key = pool.match(second)
    assert cached == 1280
    assert pool.is_head(key)
    assert pool.head_cut(second, 1300, cached) is None  # restored: nothing to save
    assert not pool.save_head(second, 1300, cached)


def test_a_head_at_the_prompts_own_checkpoint_is_that_checkpoint() -> None:
    pool = CheckpointPool(slots=8, track_interval=INTERVAL)
    prompt = _seq(HEAD + _text(100, "x"))  # 1,400 tokens: own checkpoint 1280
    assert pool.head_cut(prompt, 1300, cached=0) is None
    key = pool.save(prompt)
    assert pool.save_head(prompt, 1300, cached=0)
    assert len(pool) == 1
    assert pool.is_head(key)


@pytest.mark.parametrize("head_tokens", [0, 200, 5000])
def test_heads_that_save_nothing(head_tokens: int) -> None:
    pool = CheckpointPool(slots=8, track_interval=INTERVAL)
    prompt = _seq(HEAD + _text(700, "y"))
    pool.save(prompt)
    assert not pool.save_head(prompt, head_tokens, cached=0)
    assert len(pool) == 1
    assert pool.head_count == 0


def _pool_with_a_head() -> tuple[CheckpointPool, TokenSeq]:
    """Three slots: a session's prompt checkpoint, its head, and an unrelated checkpoint,
    oldest first."""
    pool = CheckpointPool(slots=3, track_interval=INTERVAL)
    first = _seq(HEAD + _text(700, "a"))
    pool.save(first)
    pool.save_head(first, 1300, cached=0)
    pool.save(_seq(_text(600, "unrelated z")))
    return pool, first


def _push(pool: CheckpointPool, *names: str) -> None:
    for name in names:
        pool.save(_seq(_text(600, f"unrelated {name}")))


def _head_kept(pool: CheckpointPool) -> bool:
    return pool.lookup(_seq(HEAD + _text(500, "new session"))) == 1280


def test_a_head_is_never_demoted() -> None:
    pool, _ = _pool_with_a_head()
    _, head = pool.match(_seq(HEAD + _text(10, "x")))
    assert head is not None
    assert pool.is_head(head)
    pool.demote(head)  # as a finishing turn that restored it would
    _push(pool, "w")  # evicts the oldest: the session's prompt checkpoint
    assert _head_kept(pool)


def test_a_prompt_running_through_the_head_touches_it() -> None:
    pool, first = _pool_with_a_head()
    # Restores the session's deeper checkpoint, passing through the head: both are used.
    assert pool.lookup(first.extend_text(_text(400, "next turn"))) == 1792
    _push(pool, "w", "v")  # evicts z, then the session's checkpoint
    assert _head_kept(pool)


def test_saving_through_the_head_touches_it() -> None:
    pool, first = _pool_with_a_head()
    pool.save(first.extend_text(_text(300, "reply")))  # evicts the prompt checkpoint
    _push(pool, "w")  # evicts z
    assert _head_kept(pool)


def _turn(pool: CheckpointPool, prompt: TokenSeq, head_tokens: int | None) -> TokenSeq:
    """One turn as the scheduler runs it: restore, prefill, finish; returns prompt + reply."""
    cached, restored = pool.match(prompt)
    own = pool.save(prompt)
    if head_tokens is not None:
        pool.save_head(prompt, head_tokens, cached)
    # The finished turn supersedes the checkpoints it restored and saved.
    for superseded in (restored, own):
        if superseded is not None:
            pool.demote(superseded)
    whole = prompt.extend_text(_text(300, "reply "))
    pool.save(whole)
    return whole


def _two_sessions_two_turns(pool: CheckpointPool, head_tokens: int | None) -> None:
    a = _turn(pool, _seq(HEAD + _text(700, "a")), head_tokens)
    b = _turn(pool, _seq(HEAD + _text(700, "b")), head_tokens)
    for _ in range(2):
        a = _turn(pool, a.extend_text(_text(300, "more a ")), head_tokens)
        b = _turn(pool, b.extend_text(_text(300, "more b ")), head_tokens)


def test_a_head_outlives_the_sessions_older_checkpoints() -> None:
    pool = CheckpointPool(slots=4, track_interval=INTERVAL)
    _two_sessions_two_turns(pool, head_tokens=1300)
    assert pool.head_count == 1
    assert pool.lookup(_seq(HEAD + _text(500, "new session"))) == 1280


def test_without_the_rule_the_head_is_demoted_and_evicted() -> None:
    # The same turns with the head saved as an ordinary checkpoint: the first session's
    # finish demotes it, and the next turns' checkpoints take its slot.
    pool = CheckpointPool(slots=4, track_interval=INTERVAL)
    pool.save(_seq(HEAD[: 1280 * BYTES_PER_TOKEN]))
    _two_sessions_two_turns(pool, head_tokens=None)
    assert pool.lookup(_seq(HEAD + _text(500, "new session"))) == 0


def test_an_evicted_head_leaves_no_bookkeeping() -> None:
    pool = CheckpointPool(slots=2, track_interval=INTERVAL)
    first = _seq(HEAD + _text(700, "a"))
    pool.save(first)
    pool.save_head(first, 1300, cached=0)
    for name in "xyz":
        pool.save(_seq(_text(600, name)))
    assert pool.head_count == 0
    assert len(pool) == 2


def test_the_cut_costs_a_second_forward_when_the_rest_is_short() -> None:
    perf = PerfModel(load_profile(None))
    floor = 6.5
    # A 30k head and 500 more tokens: the rest is its own forward, which pays the floor.
    extra = perf.split_prefill_extra_seconds(30_500, 0, 29_952)
    assert floor - 1.0 < extra < floor
    # Both parts above the floor: the cut costs nothing.
    assert perf.split_prefill_extra_seconds(60_000, 0, 29_952) == pytest.approx(0.0)


def test_the_field_is_read_from_sampling_params_custom_params() -> None:
    body: dict[str, Any] = {"text": "hi", "sampling_params": {}}
    assert parse_generate(body).head_tokens is None
    body["sampling_params"]["custom_params"] = {"flashbox_head_tokens": 30_000, "other": 1}
    assert parse_generate(body).head_tokens == 30_000
    for bad in ({"flashbox_head_tokens": "30000"}, {"flashbox_head_tokens": -1}, "x"):
        body["sampling_params"]["custom_params"] = bad
        with pytest.raises(SimRequestError, match="custom_params"):
            parse_generate(body)


def _prefill(url: str, text: str, head_tokens: int | None) -> dict[str, Any]:
    sampling: dict[str, Any] = {"max_new_tokens": 4}
    if head_tokens is not None:
        sampling["custom_params"] = {"flashbox_head_tokens": head_tokens}
    response = generate(url, {"text": text, "sampling_params": sampling})
    assert response.status_code == 200, response.text
    meta: dict[str, Any] = response.json()["meta_info"]
    return meta


def test_a_new_session_restores_the_30k_head(sim: Proc) -> None:
    head = _text(30_000, "You are a coding agent (head a). Tools: read, edit, run. ")
    saved_before = metric(sim.url, "flashbox_sim_head_checkpoints_saved_total")
    first = _prefill(sim.url, head + _text(600, "user: fix the build "), 30_000)
    second = _prefill(sim.url, head + _text(800, "user: add a test "), 30_000)

    assert first["cached_tokens"] == 0
    assert second["cached_tokens"] == 29_952
    assert second["sim"]["ttft_s"] < 0.5 * first["sim"]["ttft_s"]
    assert metric(sim.url, "flashbox_sim_head_checkpoints_saved_total") == saved_before + 1
    assert metric(sim.url, "flashbox_sim_head_checkpoints_restored_total") >= 1
    assert httpx.get(sim.url + "/server_info").json()["head_checkpoints_in_use"] >= 1


def test_without_the_field_nothing_changes(sim: Proc) -> None:
    head = _text(30_000, "You are a coding agent (head b). Tools: read, edit, run. ")
    first = _prefill(sim.url, head + _text(600, "user: fix the build "), None)
    second = _prefill(sim.url, head + _text(800, "user: add a test "), None)
    assert first["cached_tokens"] == 0
    assert second["cached_tokens"] == 0
    assert second["sim"]["ttft_s"] == pytest.approx(first["sim"]["ttft_s"], rel=0.05)


def test_chat_completions_pass_the_field_on(sim: Proc) -> None:
    system = _text(30_000, "You are a coding agent (head c). ")
    for question, cached in (("fix the build", 0), ("add a test", 29_952)):
        body = {
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ],
            "max_tokens": 4,
            # "system: " opens the rendered prompt: the head spans it too.
            "custom_params": {"flashbox_head_tokens": 30_002},
        }
        response = httpx.post(sim.url + "/v1/chat/completions", json=body, timeout=30.0)
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == cached
