"""The core's answer accounting (gateway.core.answer)."""

from __future__ import annotations

import pytest

from gateway.core.answer import cache_created


@pytest.mark.parametrize(
    ("prompt", "cached", "interval", "created"),
    [
        (1000, 0, 256, 768),  # a first turn: its prompt, rounded down to a checkpoint
        (1600, 768, 256, 768),  # the next turn read 768 and checkpoints up to 1536
        (1600, 1536, 256, 0),  # nothing new past the last checkpoint
        (200, 0, 256, 0),  # shorter than one interval: no checkpoint
        (1000, 0, 0, 0),  # interval unknown: nothing claimed
        (1000, 999, 1, 1),
    ],
)
def test_cache_created_is_the_newly_checkpointed_prompt(
    prompt: int, cached: int, interval: int, created: int
) -> None:
    assert cache_created(prompt, cached, interval) == created
