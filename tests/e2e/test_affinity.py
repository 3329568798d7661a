"""Session affinity across real simulator replicas: sessions stay on the replica that holds their
checkpoint (with and without x-session-id), the engine confirms it with cached tokens, sessions
spread by checkpoint budget, and the pin table stays bounded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import pytest

from bench.workload import synthetic_text
from tests.e2e.conftest import GATEWAY_ENV, MODEL, client_for, metric_sum
from tests.support.procs import Proc, start_gateway, start_sim

TRACK = 256
ADMIN = {"authorization": "Bearer adm-e2e"}
# 16 slots, 2 running: a budget of 7 sessions per replica (gateway.routing.capacity).
SIM_ARGS = ("--checkpoint-slots", "16", "--max-running-requests", "2")
AFFINITY_ENV = {**GATEWAY_ENV, "FLASHBOX_ROUTING__ADMIN_API_KEYS": json.dumps(["adm-e2e"])}
OUTPUT = {"custom_params": {"sim": {"reasoning_tokens": 0, "content_tokens": 6, "tool_calls": 0}}}


@dataclass
class Turn:
    replica: str
    prompt_tokens: int
    cached_tokens: int


@dataclass
class Session:
    index: int
    header: bool = True
    user: str | None = None
    messages: list[Any] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)

    def __post_init__(self) -> None:
        base = synthetic_text(6000, seed=self.index)
        self.messages = [
            {"role": "system", "content": f"session {self.index}. {base}"},
            {"role": "user", "content": f"task {self.index}"},
        ]

    def turn(self, client: openai.OpenAI, extra: dict[str, Any] | None = None) -> Turn:
        headers = {"x-session-id": f"e2e-{self.index}"} if self.header else {}
        body: dict[str, Any] = {**(extra or OUTPUT)}
        if self.user:
            body["user"] = self.user
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=self.messages,
            max_tokens=16,
            temperature=0,
            extra_headers=headers,
            extra_body=body,
        )
        completion = raw.parse()
        usage = completion.usage
        assert usage is not None
        assert usage.prompt_tokens_details is not None
        turn = Turn(
            raw.headers["x-flashbox-replica"],
            usage.prompt_tokens,
            usage.prompt_tokens_details.cached_tokens or 0,
        )
        self.turns.append(turn)
        reply = completion.choices[0].message.content or ""
        n = len(self.turns)
        self.messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": synthetic_text(1500, seed=self.index * 100 + n)},
        ]
        return turn

    def hit(self, n: int) -> bool:
        """Turn n (1-based, n >= 2) was served from the previous turn's checkpoint."""
        floor = self.turns[n - 2].prompt_tokens // TRACK * TRACK
        return self.turns[n - 1].cached_tokens >= floor > 0


def replicas_info(gateway: Proc) -> dict[str, dict[str, Any]]:
    data = httpx.get(gateway.url + "/admin/replicas", headers=ADMIN, timeout=5).json()["data"]
    return {r["name"]: r for r in data}


@pytest.fixture(scope="module")
def sims() -> Iterator[list[Proc]]:
    procs: list[Proc] = []
    try:
        for i in range(3):
            procs.append(start_sim(*SIM_ARGS, name=f"r{i}"))
        yield procs
    finally:
        for proc in procs:
            proc.stop()


@pytest.fixture(scope="module")
def gateway(sims: list[Proc]) -> Iterator[Proc]:
    proc = start_gateway([s.url for s in sims], env=AFFINITY_ENV)
    try:
        yield proc
    finally:
        proc.stop()


def test_sessions_keep_their_replica_and_hit_from_turn_two(gateway: Proc) -> None:
    hits_before = metric_sum(gateway, "flashbox_affinity_total", {"outcome": "hit"})
    sessions = [Session(100), Session(101, header=False), Session(102, header=False, user="u")]
    with client_for(gateway) as client:
        for _ in range(3):
            for session in sessions:
                session.turn(client)
    for session in sessions:
        assert len({t.replica for t in session.turns}) == 1, session.turns
        assert session.hit(2), session.turns
        assert session.hit(3), session.turns
    hits = metric_sum(gateway, "flashbox_affinity_total", {"outcome": "hit"}) - hits_before
    assert hits == 6
    assert metric_sum(gateway, "flashbox_affinity_total", {"outcome": "verified_miss"}) == 0


def test_sessions_beyond_one_replicas_slots_spread_without_misses(
    gateway: Proc, sims: list[Proc]
) -> None:
    info = replicas_info(gateway)
    assert {r["checkpoint_slots"] for r in info.values()} == {16}
    # (16 slots - 2 running - 1) / 1 checkpoint per session + 1
    assert {r["session_budget"] for r in info.values()} == {14}
    free = sum(r["session_budget"] - r["live_sessions"] for r in info.values())
    # As many sessions as the replicas have room for: more than one replica's 16 slots.
    sessions = [Session(200 + i) for i in range(free)]
    assert len(sessions) > 16
    with client_for(gateway) as client:
        for _ in range(3):
            for session in sessions:
                session.turn(client)
    for session in sessions:
        assert len({t.replica for t in session.turns}) == 1
        assert session.hit(2), session.turns
        assert session.hit(3), session.turns
    info = replicas_info(gateway)
    assert all(r["live_sessions"] <= r["session_budget"] for r in info.values())
    assert metric_sum(gateway, "flashbox_affinity_total", {"outcome": "verified_miss"}) == 0


def test_the_pin_table_stays_within_its_bound(sims: list[Proc]) -> None:
    env = {**AFFINITY_ENV, "FLASHBOX_ROUTING__PIN_TABLE_SIZE": "4"}
    gateway = start_gateway([s.url for s in sims], env=env)
    try:
        with client_for(gateway) as client:
            for i in range(10):
                Session(300 + i).turn(client)
        assert sum(r["live_sessions"] for r in replicas_info(gateway).values()) == 4
        assert metric_sum(gateway, "flashbox_affinity_total", {"outcome": "new"}) == 10
    finally:
        gateway.stop()
