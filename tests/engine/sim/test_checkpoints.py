"""The recurrent-state checkpoint pool seen through the API: hits, LRU eviction."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.engine.sim.helpers import generate
from tests.support.procs import Proc, start_sim

INTERVAL = 64


@pytest.fixture(scope="module")
def small_pool() -> Iterator[Proc]:
    proc = start_sim(
        "--checkpoint-slots", "4", "--track-interval", str(INTERVAL), name="small-pool"
    )
    try:
        yield proc
    finally:
        proc.stop()


def _turn(url: str, text: str) -> dict[str, object]:
    body = {"text": text, "sampling_params": {"max_new_tokens": 80}}
    result: dict[str, object] = generate(url, body).json()
    return result


def _session_prompt(name: str) -> str:
    return f"[gMASK]<sop><|user|>session {name} " + name * 1000 + "<|assistant|><think>"


def _cached(result: dict[str, object]) -> int:
    meta = result["meta_info"]
    assert isinstance(meta, dict)
    return int(meta["cached_tokens"])


def test_second_turn_extends_first_and_hits(small_pool: Proc) -> None:
    first = _session_prompt("a")
    turn1 = _turn(small_pool.url, first)
    assert _cached(turn1) == 0
    second = first + str(turn1["text"]) + "<|user|>more<|assistant|><think>"
    turn2 = _turn(small_pool.url, second)
    prompt_tokens = -(-len(first.encode()) // 4)
    assert _cached(turn2) >= (prompt_tokens // INTERVAL) * INTERVAL
    # It extends the whole first sequence (prompt + output), not just the prompt.
    assert _cached(turn2) > prompt_tokens


def test_eviction_when_sessions_exceed_slots(small_pool: Proc) -> None:
    httpx.post(small_pool.url + "/sim/config", json={"clear_checkpoints": True})
    prompts = {name: _session_prompt(name) for name in "bcdefg"}
    outputs = {name: str(_turn(small_pool.url, prompt)["text"]) for name, prompt in prompts.items()}
    info = httpx.get(small_pool.url + "/server_info").json()
    assert info["checkpoints_in_use"] == 4
    assert info["checkpoint_evictions"] > 0
    # The oldest sessions lost their checkpoints; the newest kept theirs.
    assert _cached(_turn(small_pool.url, prompts["b"] + outputs["b"] + "tail" * 80)) == 0
    assert _cached(_turn(small_pool.url, prompts["g"] + outputs["g"] + "tail" * 80)) > 0


def test_slots_hold_as_many_sessions(small_pool: Proc) -> None:
    # Each turn saves two checkpoints, but the superseded prompt one goes first: four slots
    # keep four sessions' latest turns.
    httpx.post(small_pool.url + "/sim/config", json={"clear_checkpoints": True})
    prompts = {name: _session_prompt(name) for name in "hijk"}
    outputs = {name: str(_turn(small_pool.url, prompt)["text"]) for name, prompt in prompts.items()}
    for name, prompt in prompts.items():
        follow_up = prompt + outputs[name] + "<|user|>next<|assistant|><think>"
        assert _cached(_turn(small_pool.url, follow_up)) > len(prompt.encode()) // 4 - INTERVAL


def test_unrelated_prompt_misses(small_pool: Proc) -> None:
    assert _cached(_turn(small_pool.url, "completely different " * 100)) == 0


def test_the_seam_between_prompt_and_output_restores_what_the_engine_would() -> None:
    """A prompt whose last 4-byte chunk is partial shares it with the output in the next turn's
    prompt, so the sequence has one chunk fewer than prompt + output - 1 (the engine's state).
    When that is exactly an interval boundary, the next prompt that carries the sequence still
    restores it, as the engine restores from a tokenizer whose generation prompt ends in a
    special token."""
    from engine.sim.checkpoints import CheckpointPool
    from engine.sim.tokens import from_text

    # The engine holds 8 tokens (boundary 8); the bytes hold 7 full chunks (boundary 0).
    pool = CheckpointPool(slots=4, track_interval=8)
    prompt = from_text("p" * 13, 4)
    output = "o" * 18  # 5 tokens (4+4+4+4+2)
    sequence = prompt.extend_text(output)  # 31 bytes: 7 full chunks
    pool.save(sequence, prompt.count + 5 - 1)  # 8 tokens: boundary 8
    assert pool.boundary(sequence) == 0
    assert pool.lookup(from_text("p" * 13 + output + "and more text", 4)) == 8
    # A prompt that does not carry the sequence does not get it.
    assert pool.lookup(from_text("p" * 13 + "x" * 30, 4)) == 0
