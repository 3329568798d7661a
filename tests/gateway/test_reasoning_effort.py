"""Reasoning effort is one mapping on every face (gateway.core.effort): each API's published
value reaches the same `Reasoning Effort:` line, and "none" turns reasoning off. Sent by the
official clients, so the values are the ones their types allow."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.core.effort import reasoning_mode
from tests.gateway.conftest import MODEL
from tests.gateway.faces.sdk_clients import anthropic_client, openai_client
from tests.gateway.fake_engine import FakeEngine, Script

USER: list[Any] = [{"role": "user", "content": "hi"}]
# The template's three levels, as the prompt's first line says them.
LEVELS = {
    "minimal": "Low",
    "low": "Low",
    "medium": "High",
    "high": "High",
    "xhigh": "Max",
    "max": "Max",
}
ANTHROPIC = ("low", "medium", "high", "xhigh", "max")


def effort_line(prompt: str) -> str:
    return prompt.split("Reasoning Effort: ", 1)[1][:4].rstrip("<")


# "max" joined openai-python's ReasoningEffort after the Responses face's Effort set was written
# (gateway/faces/responses/protocol.py): strict, so this fails once that set takes it too.


@pytest.mark.parametrize("effort", list(LEVELS))
async def test_chat_renders_the_level(
    engine: FakeEngine, client: httpx.AsyncClient, effort: Any
) -> None:
    await openai_client(client).chat.completions.create(
        model=MODEL, messages=USER, reasoning_effort=effort
    )
    assert effort_line(engine.generates[0]["text"]) == LEVELS[effort]


@pytest.mark.parametrize(
    "effort",
    LEVELS,
)
async def test_responses_renders_the_level_chat_does(
    engine: FakeEngine, client: httpx.AsyncClient, effort: Any
) -> None:
    await openai_client(client).responses.create(
        model=MODEL, input="hi", reasoning={"effort": effort}, store=False
    )
    assert effort_line(engine.generates[0]["text"]) == LEVELS[effort]


@pytest.mark.parametrize("effort", ANTHROPIC)
async def test_messages_renders_the_level_openai_faces_do(
    engine: FakeEngine, client: httpx.AsyncClient, effort: Any
) -> None:
    await anthropic_client(client).messages.create(
        model=MODEL, max_tokens=64, messages=USER, output_config={"effort": effort}
    )
    assert effort_line(engine.generates[0]["text"]) == LEVELS[effort]


async def test_chat_effort_none_turns_reasoning_off(
    engine: FakeEngine, client: httpx.AsyncClient
) -> None:
    """Kilo's CLI titles its sessions with reasoning_effort "none"."""
    engine.script = Script(pieces=["A", " title"])
    completion = await openai_client(client).chat.completions.create(
        model=MODEL, messages=USER, reasoning_effort="none"
    )
    assert engine.generates[0]["text"].endswith("<|assistant|><think></think>")
    assert completion.choices[0].message.content == "A title"


async def test_chat_refuses_an_effort_outside_the_api_set(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "messages": USER, "reasoning_effort": "extreme"}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "reasoning_effort"
    assert "'none'" in error["message"]
    assert "'xhigh'" in error["message"]


def test_one_mapping() -> None:
    assert reasoning_mode(None) == ({}, True)
    assert reasoning_mode("none") == ({}, False)
    for effort, level in LEVELS.items():
        assert reasoning_mode(effort) == ({"reasoning_effort": level.lower()}, True)
