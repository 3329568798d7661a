"""Synthetic prompts whose length is controlled without the model's tokenizer.

Text is drawn from a fixed vocabulary so that `chars_per_token` characters make about one
token; the server's usage chunk reports the real count, and reports use that. A nonce at the
start makes every prompt unique, so no prefix cache helps a benchmark that means to be cold.
"""

from __future__ import annotations

import random

_WORDS = (
    "the",
    "engine",
    "streams",
    "experts",
    "over",
    "pcie",
    "while",
    "attention",
    "runs",
    "on",
    "gpu",
    "and",
    "cpu",
    "computes",
    "routed",
    "for",
    "every",
    "token",
    "of",
    "prompt",
    "in",
    "chunks",
    "sixteen",
    "thousand",
)


def synthetic_text(chars: int, *, seed: int) -> str:
    """About `chars` characters of word salad, deterministic for the seed."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)[:chars]


def synthetic_prompt(tokens: int, *, seed: int, chars_per_token: float, nonce: str = "") -> str:
    """A prompt of about `tokens` tokens; `nonce` leads it so prompts differ from the start."""
    head = f"[{nonce}] " if nonce else ""
    return head + synthetic_text(max(0, int(tokens * chars_per_token) - len(head)), seed=seed)
