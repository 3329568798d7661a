"""A conversation re-sent from an earlier point, through the gateway and a real simulator with
the official openai client: a retry of turn 2 after turn 3 answered, and the same messages sent
twice (the Vercel AI SDK's generateText then streamText). Neither is promised a checkpoint its
prompt does not reach, so neither is a verified miss (docs/affinity.md, Verification)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from bench.workload import synthetic_text
from tests.e2e.conftest import MODEL, client_for, metric_sum, sim_and_gateway
from tests.support.procs import Proc

# A short track interval: the few characters turn 3 adds to turn 2 (an answer and "go on")
# cross a checkpoint, as a long conversation's turns cross the engine's 256-token ones.
TRACK = 16
BYTES_PER_TOKEN = 4  # the simulator's profile (config/sim)
OUTPUT = {"custom_params": {"sim": {"reasoning_tokens": 0, "content_tokens": 6, "tool_calls": 0}}}


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Proc, Proc]]:
    yield from sim_and_gateway("--track-interval", str(TRACK))


def affinity(gateway: Proc, outcome: str) -> float:
    return metric_sum(gateway, "flashbox_affinity_total", {"outcome": outcome, "lineage": "main"})


def send(client: openai.OpenAI, session: str, messages: list[Any]) -> tuple[int, int, str]:
    """One turn: (prompt tokens, cached tokens, the answer's text)."""
    answer = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=16,
        temperature=0,
        extra_headers={"x-session-id": session},
        extra_body=OUTPUT,
    )
    usage = answer.usage
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    cached = usage.prompt_tokens_details.cached_tokens or 0
    return usage.prompt_tokens, cached, answer.choices[0].message.content or ""


def opening(seed: int) -> list[Any]:
    return [
        {"role": "system", "content": "You are a coding agent. " + synthetic_text(600, seed=seed)},
        {"role": "user", "content": "fix the bug in parse()"},
    ]


def test_turn_two_re_sent_after_turn_three_is_restarted_not_a_miss(
    stack: tuple[Proc, Proc],
) -> None:
    _, gateway = stack
    misses, restarted = affinity(gateway, "verified_miss"), affinity(gateway, "restarted")
    messages = opening(seed=1)
    with client_for(gateway) as client:
        _, _, answer = send(client, "retry", messages)
        messages += [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "and the tests too, please"},
        ]
        turn2 = list(messages)
        tokens2, _, answer = send(client, "retry", turn2)
        messages += [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "go on, and keep the public names as they are"},
        ]
        tokens3, _, _ = send(client, "retry", messages)
        # Turn 3 reaches a checkpoint past turn 2's prompt, within the characters the
        # gateway's extension check leaves uncompared at a prompt's end.
        assert tokens3 - tokens2 >= TRACK
        assert (tokens3 - tokens2) * BYTES_PER_TOKEN < 256
        # The client retries from turn 2 (its answer was lost, or it regenerates it).
        again, cached, _ = send(client, "retry", turn2)
    assert again == tokens2
    assert cached < tokens3 // TRACK * TRACK
    # Before: promised turn 3's checkpoint, and counted a verified miss.
    assert affinity(gateway, "verified_miss") == misses
    assert affinity(gateway, "restarted") == restarted + 1


def test_the_same_messages_sent_twice_are_a_hit_not_a_miss(stack: tuple[Proc, Proc]) -> None:
    """An identical re-send extends the last prompt by nothing: a hit on its own checkpoint.
    Its prompt is a whole number of intervals long, where the engine restores one interval
    less (it computes at least the last token): before, it was promised all of it."""
    _, gateway = stack
    messages = opening(seed=2)
    with client_for(gateway) as client:
        _, _, answer = send(client, "twice", messages)
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "ok"}]
        # Another session measures the prompt, so that a padded last message aligns it.
        probe, _, _ = send(client, "twice-probe", messages)
        messages[-1]["content"] += "k" * ((-probe % TRACK) * BYTES_PER_TOKEN)
        misses, hits = affinity(gateway, "verified_miss"), affinity(gateway, "hit")
        tokens, _, _ = send(client, "twice", messages)
        assert tokens % TRACK == 0
        again, cached, _ = send(client, "twice", messages)
    assert again == tokens
    assert cached == tokens - TRACK
    # Before: the re-send was promised all `tokens` and counted a verified miss.
    assert affinity(gateway, "verified_miss") == misses
    assert affinity(gateway, "hit") == hits + 2
