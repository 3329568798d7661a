"""Shared prompt heads through three real simulators and the gateway (docs/affinity.md, Prompt
heads): the first session of a project pays its head's prefill, the second saves the head, and
every session from the third on restores it, however the sessions' keys hash and before the
head has been warmed anywhere else (a warm takes a head's whole prefill, ~22 s at 30k)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from bench.workload import synthetic_text
from tests.e2e.conftest import MODEL, client_for
from tests.e2e.test_lineages import ENV, OUTPUT, TOOLS, TRACK
from tests.support.idle import check_idle
from tests.support.procs import Proc, start_gateway, start_sim

# About 6.4k tokens of system prompt and tools, as the client matrix's agents send: past the
# default routing.min_head_tokens (4,096), so no override here.
SYSTEM = "You are an agent in project H. " + synthetic_text(24000, seed=39)
TITLE = "Generate a short title for the conversation. " + synthetic_text(200, seed=40)
HEAD_ENV = {k: v for k, v in ENV.items() if k != "FLASHBOX_ROUTING__MIN_HEAD_TOKENS"}


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[list[Proc], Proc]]:
    # Prefills take a twentieth of the reference host's time (a cold head ~0.25 s), so a warm
    # is still running when the next session arrives, as it is with a 30k head's ~22 s.
    sims = [start_sim(name=f"heads-{i}", time_scale=0.05) for i in range(3)]
    try:
        gateway = start_gateway([s.url for s in sims], env=HEAD_ENV)
        try:
            yield sims, gateway
            check_idle(gateway)
        finally:
            gateway.stop()
    finally:
        for sim in sims:
            sim.stop()


def turn(
    client: openai.OpenAI, session: str, system: str, task: str, *, stream: bool, tools: bool
) -> tuple[int, int]:
    """One request of a session: (prompt tokens, cached tokens)."""
    messages: list[Any] = [
        {"role": "system", "content": system},
        {"role": "user", "content": task},
    ]
    body: dict[str, Any] = {**OUTPUT, "tools": TOOLS} if tools else OUTPUT
    headers = {"x-session-id": session}
    if stream:
        usage = None
        chunks = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=16,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=headers,
            extra_body=body,
        )
        for chunk in chunks:
            usage = chunk.usage or usage
    else:
        answer = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=16,
            extra_headers=headers,
            extra_body=body,
        )
        usage = answer.usage
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    return usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens or 0


def test_every_session_from_the_third_on_restores_the_shared_head(
    stack: tuple[list[Proc], Proc],
) -> None:
    _, gateway = stack
    cached: list[int] = []
    with client_for(gateway) as client:
        for n in range(1, 7):
            # Each a new session under a random key (placement hashes it), streamed or not, and
            # its title request (a side lineage, charged beside it: opencode's and Kilo's shape).
            session, task = str(uuid.uuid4()), f"task {n}"
            streamed = n % 2 == 0
            prompt, hit = turn(client, session, SYSTEM, task, stream=streamed, tools=True)
            turn(client, session, TITLE, task, stream=streamed, tools=False)
            cached.append(hit)
    head = (prompt - 100) // TRACK * TRACK
    # The first two prefill the head (the second saves it); the rest restore it, the fourth
    # and later too while the head is still held on one replica only.
    assert cached[:2] == [0, 0]
    assert all(hit >= head > 6000 for hit in cached[2:]), cached
