"""gateway.core.heads: the head's token count, and when a head is worth a checkpoint."""

from __future__ import annotations

import asyncio

from gateway.core.heads import HeadTokens


async def _tokens(text: str) -> int:
    return len(text)


def test_a_head_is_shared_once_a_second_session_shows_it() -> None:
    heads = HeadTokens(8)
    assert asyncio.run(heads.count("h", "x" * 5000, _tokens)) == 5000
    # The first session, however many turns: not worth a slot yet.
    assert not heads.shared("h", "s1")
    assert not heads.shared("h", "s1")
    # A second session: saved from now on, for every session, the first one included.
    assert heads.shared("h", "s2")
    assert heads.shared("h", "s1")


def test_requests_without_a_session_each_count_as_one() -> None:
    heads = HeadTokens(8)
    asyncio.run(heads.count("h", "x" * 5000, _tokens))
    assert not heads.shared("h", None)
    assert heads.shared("h", None)


def test_an_uncounted_or_evicted_head_is_not_shared() -> None:
    heads = HeadTokens(1)
    assert not heads.shared("h", "s1")
    asyncio.run(heads.count("h", "x" * 5000, _tokens))
    heads.shared("h", "s1")
    # Another head evicts it from the bounded table: its sightings start again.
    asyncio.run(heads.count("g", "y" * 5000, _tokens))
    assert len(heads) == 1
    asyncio.run(heads.count("h", "x" * 5000, _tokens))
    assert not heads.shared("h", "s2")
