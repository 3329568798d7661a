"""Token counts by rendered prompt (gateway/core/prompt_counts.py): a known prompt costs no
/tokenize, one prompt counted at once is one call, and /tokenize calls at once are bounded."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.prompt_counts import PromptCounts
from gateway.errors import NoReplicaError, RateLimitError
from gateway.settings import LimitSettings


class Tokenizer:
    """The engine's side: counts a token per character, optionally held until released."""

    def __init__(self, *, held: bool = False) -> None:
        self.calls: list[str] = []
        self.running = 0
        self.most_running = 0
        self.release = asyncio.Event()
        if not held:
            self.release.set()

    async def __call__(self, prompt: str) -> int:
        self.calls.append(prompt)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        return len(prompt)


def counts(**limits: object) -> PromptCounts:
    return PromptCounts(LimitSettings.model_validate(limits))


async def test_a_known_prompt_is_not_counted_again() -> None:
    known, tokenize = counts(), Tokenizer()
    assert await known.count("a prompt", tokenize) == 8
    assert await known.count("a prompt", tokenize) == 8
    assert await known.count("another", tokenize) == 7
    assert tokenize.calls == ["a prompt", "another"]


async def test_the_cache_is_bounded_oldest_out_first() -> None:
    known, tokenize = counts(count_cache_entries=2), Tokenizer()
    for prompt in ("one", "two", "one", "three"):  # "one" was used last: "two" goes
        await known.count(prompt, tokenize)
    assert len(known) == 2
    await known.count("one", tokenize)
    await known.count("two", tokenize)
    assert tokenize.calls == ["one", "two", "three", "two"]


async def test_concurrent_counts_of_one_prompt_share_one_call() -> None:
    known, tokenize = counts(), Tokenizer(held=True)
    asks = [asyncio.create_task(known.count("same", tokenize)) for _ in range(5)]
    await asyncio.sleep(0)
    tokenize.release.set()
    assert await asyncio.gather(*asks) == [4] * 5
    assert tokenize.calls == ["same"]


async def test_tokenize_calls_at_once_are_bounded_and_a_long_wait_is_a_429() -> None:
    known = counts(max_concurrent_counts=2, count_wait_s=0.2)
    tokenize = Tokenizer(held=True)
    running = [asyncio.create_task(known.count(p, tokenize)) for p in ("p1", "p2")]
    await asyncio.sleep(0.01)
    with pytest.raises(RateLimitError) as refused:
        await known.count("p3", tokenize)
    assert refused.value.status_code == 429
    assert refused.value.headers["retry-after"]
    assert "limits.max_concurrent_counts" in refused.value.message
    tokenize.release.set()
    assert await asyncio.gather(*running) == [2, 2]
    assert tokenize.most_running == 2
    assert tokenize.calls == ["p1", "p2"]
    assert await known.count("p3", tokenize) == 2  # a slot is free again


async def test_a_failed_count_is_not_kept() -> None:
    known = counts()
    failures = 0

    async def down(prompt: str) -> int:
        nonlocal failures
        failures += 1
        raise NoReplicaError("down")

    with pytest.raises(NoReplicaError):
        await known.count("p", down)
    assert await known.count("p", Tokenizer()) == 1
    assert failures == 1


async def test_a_count_whose_asker_left_is_asked_again_by_the_one_waiting() -> None:
    known, tokenize = counts(), Tokenizer(held=True)
    first = asyncio.create_task(known.count("p", tokenize))
    await asyncio.sleep(0)
    second = asyncio.create_task(known.count("p", tokenize))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    tokenize.release.set()
    assert await second == 1
    assert first.cancelled()
    assert len(tokenize.calls) == 2
