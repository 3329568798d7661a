"""Agentic sessions as real clients shape them, through real simulators and the gateway: a
title request between agent turns, parallel subagents, compaction, and a new session that
restores another session's prompt-head checkpoint (docs/affinity.md, Lineages and Prompt heads).
The official openai and anthropic clients send the headers opencode and Claude Code send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest

from bench.workload import synthetic_text
from tests.e2e.conftest import GATEWAY_ENV, MODEL, client_for, metric_sum
from tests.support.procs import Proc, sims_behind_gateway

TRACK = 256
ADMIN = {"authorization": "Bearer adm-e2e"}
ENV = {
    **GATEWAY_ENV,
    "FLASHBOX_ROUTING__ADMIN_API_KEYS": json.dumps(["adm-e2e"]),
    # The heads here are ~2k tokens (Claude Code's are ~30k): count them as prompt heads.
    "FLASHBOX_ROUTING__MIN_HEAD_TOKENS": "512",
}
OUTPUT = {"custom_params": {"sim": {"reasoning_tokens": 0, "content_tokens": 6, "tool_calls": 0}}}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file. " + synthetic_text(1200, seed=99),
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
ANTHROPIC_TOOLS: list[Any] = [
    {
        "name": "read_file",
        "description": TOOLS[0]["function"]["description"],
        "input_schema": TOOLS[0]["function"]["parameters"],
    }
]


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[list[Proc], Proc]]:
    with sims_behind_gateway("lineage", ENV) as procs:
        yield procs


def affinity(gateway: Proc, outcome: str, lineage: str) -> float:
    return metric_sum(gateway, "flashbox_affinity_total", {"outcome": outcome, "lineage": lineage})


def claude_code(gateway: Proc, headers: dict[str, str]) -> anthropic.Anthropic:
    """The official client as Claude Code sets it up: its session headers on every request."""
    return anthropic.Anthropic(
        base_url=gateway.url, api_key="unused", max_retries=0, default_headers=headers
    )


def prompt_and_cached(usage: anthropic.types.Usage) -> tuple[int, int]:
    cached = usage.cache_read_input_tokens or 0
    created = usage.cache_creation_input_tokens or 0
    return usage.input_tokens + cached + created, cached


def live_lineages(gateway: Proc) -> int:
    data = httpx.get(gateway.url + "/admin/replicas", headers=ADMIN, timeout=5).json()["data"]
    return sum(int(r["live_sessions"]) for r in data)


@dataclass
class ChatConversation:
    """An OpenAI chat conversation under a session header (opencode's shape)."""

    session: str
    system: str
    first: str
    tools: list[Any] | None
    messages: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.messages = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.first},
        ]

    def turn(self, client: openai.OpenAI) -> tuple[int, int, str]:
        """One turn: (prompt tokens, cached tokens, replica)."""
        extra: dict[str, Any] = {"tools": self.tools} if self.tools else {}
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=self.messages,
            max_tokens=16,
            temperature=0,
            extra_headers={"x-session-id": self.session},
            extra_body={**OUTPUT, **extra},
        )
        answer = raw.parse()
        usage = answer.usage
        assert usage is not None
        assert usage.prompt_tokens_details is not None
        self.messages += [
            {"role": "assistant", "content": answer.choices[0].message.content or ""},
            {"role": "user", "content": synthetic_text(300, seed=len(self.messages))},
        ]
        cached = usage.prompt_tokens_details.cached_tokens or 0
        return usage.prompt_tokens, cached, raw.headers["x-flashbox-replica"]


def test_a_title_request_between_agent_turns_is_a_side_lineage(
    stack: tuple[list[Proc], Proc],
) -> None:
    """opencode: one x-session-id for the agent's turns and its title request (another system
    prompt, no tools). Before lineages the agent's next turn was a verified miss."""
    _, gateway = stack
    agent = ChatConversation(
        "oc-title", "You are opencode. " + synthetic_text(2000, seed=1), "fix the bug", TOOLS
    )
    title = ChatConversation(
        "oc-title", "Generate a title. " + synthetic_text(200, seed=2), "fix the bug", None
    )
    misses = affinity(gateway, "verified_miss", "main")
    with client_for(gateway) as client:
        first_tokens, _, replica = agent.turn(client)
        title.turn(client)
        _, cached, again = agent.turn(client)
    assert again == replica
    assert cached >= first_tokens // TRACK * TRACK > 0
    assert affinity(gateway, "new", "side") >= 1
    assert affinity(gateway, "verified_miss", "main") == misses


def _subagent_turns(gateway: Proc, agent: int) -> list[tuple[int, int]]:
    """Two turns of one Claude Code subagent: [(prompt tokens, cached tokens)]."""
    headers = {"x-claude-code-session-id": "cc-sub", "x-claude-code-agent-id": f"agent-{agent}"}
    system = f"You are subagent {agent}. " + synthetic_text(1500, seed=10 + agent)
    messages: list[Any] = [{"role": "user", "content": f"explore part {agent}"}]
    out = []
    with claude_code(gateway, headers) as client:
        for _ in range(2):
            answer = client.messages.create(
                model=MODEL,
                max_tokens=16,
                system=system,
                tools=ANTHROPIC_TOOLS,
                messages=messages,
                thinking={"type": "disabled"},
                extra_body=OUTPUT,
            )
            out.append(prompt_and_cached(answer.usage))
            text = "".join(b.text for b in answer.content if b.type == "text")
            messages += [
                {"role": "assistant", "content": text or "ok"},
                {"role": "user", "content": synthetic_text(200, seed=agent)},
            ]
    return out


def test_parallel_subagents_each_hit_their_own_checkpoint(stack: tuple[list[Proc], Proc]) -> None:
    _, gateway = stack
    hits = affinity(gateway, "hit", "subagent")
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda a: _subagent_turns(gateway, a), range(3)))
    for (first_prompt, _), (_, cached) in results:
        assert cached >= first_prompt // TRACK * TRACK > 0
    assert affinity(gateway, "hit", "subagent") == hits + 3


def test_compaction_frees_the_old_lineage(stack: tuple[list[Proc], Proc]) -> None:
    """A conversation restarted from a summary (same head, new first message) retires the old
    lineage: the session holds one live conversation, not two."""
    _, gateway = stack
    system = "You are opencode. " + synthetic_text(2000, seed=3)
    before = ChatConversation("oc-compact", system, "a long task", TOOLS)
    with client_for(gateway) as client:
        live = live_lineages(gateway)
        before.turn(client)
        before.turn(client)
        assert live_lineages(gateway) == live + 1
        after = ChatConversation("oc-compact", system, "Summary of the task so far: ...", TOOLS)
        after.turn(client)
        assert live_lineages(gateway) == live + 1
        _, cached, _ = after.turn(client)
    assert cached > 0


def test_a_new_session_restores_the_prompt_head_of_another(stack: tuple[list[Proc], Proc]) -> None:
    """Sessions of one client and project: the same system prompt and tools, different first
    messages. The first session's head is not checkpointed (no other session may share it);
    the second one's is, and the third session's first turn restores it."""
    _, gateway = stack
    system = "You are Claude Code in project X. " + synthetic_text(2400, seed=4)
    head_hits = affinity(gateway, "head_hit", "main")
    head_misses = affinity(gateway, "head_miss", "main")
    with client_for(gateway) as client:
        _, first_cached, _ = ChatConversation("head-1", system, "task one", TOOLS).turn(client)
        assert first_cached == 0
        _, _, saver = ChatConversation("head-2", system, "task two", TOOLS).turn(client)
        # The first session's head was not saved, so the second was not placed on it (it may
        # still restore the first one's prompt checkpoint, when that falls inside the head).
        assert affinity(gateway, "head_hit", "main") == head_hits
        assert affinity(gateway, "head_miss", "main") == head_misses
        prompt, cached, replica = ChatConversation("head-3", system, "task 3", TOOLS).turn(client)
    assert replica == saver
    # The head (system + tools) is most of the prompt; the checkpoint sits at its end.
    assert cached >= (prompt - 200) // TRACK * TRACK - TRACK > 0
    assert affinity(gateway, "head_hit", "main") == head_hits + 1


def test_turns_that_send_the_reasoning_back_restore_prompt_and_output(
    stack: tuple[list[Proc], Proc],
) -> None:
    """Claude Code sends each thinking block back with its signature, so the next prompt
    carries the previous output verbatim: the engine (the simulator keys by bytes) restores the
    checkpoint of prompt and output together, and the gateway's output promise is that
    checkpoint, counted restored. A promise one token too long would count them lost."""
    _, gateway = stack
    hits, misses = affinity(gateway, "hit", "main"), affinity(gateway, "verified_miss", "main")
    restored = metric_sum(gateway, "flashbox_output_checkpoint_total", {"outcome": "restored"})
    lost = metric_sum(gateway, "flashbox_output_checkpoint_total", {"outcome": "lost"})
    system = "You are Claude Code. " + synthetic_text(1500, seed=7)
    messages: list[Any] = [{"role": "user", "content": "Look at the failing test."}]
    body = {"custom_params": {"sim": {"reasoning_tokens": 700, "content_tokens": 30}}}
    headers = {"x-claude-code-session-id": "cc-output-promise"}
    previous: tuple[int, int] | None = None
    with claude_code(gateway, headers) as client:
        for turn in range(3):
            answer = client.messages.create(
                model=MODEL,
                max_tokens=1024,
                system=system,
                messages=messages,
                tools=ANTHROPIC_TOOLS,
                extra_body=body,
            )
            prompt, cached = prompt_and_cached(answer.usage)
            if previous is not None:
                # Past the previous prompt's checkpoint: prompt and output were restored.
                assert cached >= (previous[0] + previous[1] - 1) // TRACK * TRACK > previous[0]
            previous = (prompt, answer.usage.output_tokens)
            blocks = [block.to_dict() for block in answer.content]
            assert blocks[0]["type"] == "thinking"
            messages += [
                {"role": "assistant", "content": blocks},
                {"role": "user", "content": f"Go on ({turn})."},
            ]
    assert affinity(gateway, "hit", "main") == hits + 2
    assert affinity(gateway, "verified_miss", "main") == misses
    # The simulator's tokens are its text's: an answer sent back is always its own tokens.
    after = metric_sum(gateway, "flashbox_output_checkpoint_total", {"outcome": "restored"})
    assert after == restored + 2
    assert metric_sum(gateway, "flashbox_output_checkpoint_total", {"outcome": "lost"}) == lost
