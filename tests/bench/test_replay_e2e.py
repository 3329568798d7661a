"""A small shape replayed end to end (bench.replay) against a real simulator and gateway on
loopback, in each API: every request is answered, and every turn that extends an answered one
finds its checkpoint (one replica, room for all: a miss would be the replay's history not
extending its parent byte for byte)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.replay import ReplayConfig, replay, with_engine_timings
from bench.replay_report import summarize_replay
from bench.sessions import main as sessions_main
from bench.shape_synth import SyntheticParams, generate
from bench.shapes import Api, dump_shape
from bench.timings import fetch_engine_timings
from tests.support.procs import Proc, start_gateway, start_sim

TIME_SCALE = 0.001
# 2 sessions: subagents, side requests, a compaction; small heads keep it to seconds.
PARAMS = SyntheticParams(
    sessions=2,
    turns=4,
    subagents=1,
    subagents_at_once=1,
    subagent_turns=2,
    side_requests=2,
    compact_after=2,
    head_tokens=2_000,
    subagent_head_tokens=1_200,
    side_head_tokens=300,
    first_message_tokens=300,
    growth_tokens=200,
    output_tokens=40,
    think_s=5.0,
    tool_s=1.0,
    seed=3,
)


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Proc, Proc]]:
    sim = start_sim(time_scale=TIME_SCALE)
    try:
        gateway = start_gateway(
            [sim.url],
            env={
                "FLASHBOX_UPSTREAM__FORWARD_CUSTOM_PARAMS": "true",
                "FLASHBOX_LIMITS__MAX_BODY_BYTES": str(4 * 1024 * 1024),
                "FLASHBOX_API_KEYS": "",
            },
        )
        try:
            yield sim, gateway
        finally:
            gateway.stop()
    finally:
        sim.stop()


@pytest.mark.parametrize(
    ("api", "chat_only"),
    [("anthropic", False), ("responses", False), ("openai", False), ("anthropic", True)],
    ids=["anthropic", "responses", "openai", "chat-only"],
)
def test_every_request_is_answered_and_every_turn_hits(
    stack: tuple[Proc, Proc], api: Api, chat_only: bool
) -> None:
    sim, gateway = stack
    shape = generate(PARAMS).model_copy(update={"api": api})
    cfg = ReplayConfig(
        url=gateway.url + "/v1",
        model="glm-5.3-flash",
        time_scale=TIME_SCALE,
        timeout_s=60.0,
        chat_only=chat_only,
    )
    results = asyncio.run(replay(shape, cfg))
    assert len(results) == sum(len(s.requests) for s in shape.sessions)
    assert [r.error for r in results if not r.ok] == []
    kinds = {r.kind for r in results}
    assert kinds == {"main", "subagent", "side"}
    assert any(r.compacted for r in results)
    eligible = [r for r in results if r.eligible]
    assert len(eligible) == sum(r.extends is not None for s in shape.sessions for r in s.requests)
    assert [(r.session, r.index) for r in eligible if not r.hit] == []
    # The recorded sizes: roots within the template's wrapping of the head, turns closer.
    for session in shape.sessions:
        for r in (x for x in results if x.session == session.id):
            planned = session.requests[r.index].prompt_tokens
            assert abs(r.prompt_tokens - planned) < 0.15 * planned + 64
    timed = with_engine_timings(results, fetch_engine_timings([sim.url]), TIME_SCALE)
    assert all(r.ttft is not None and r.ttft != r.ttft_scaled for r in timed)
    summary = summarize_replay(timed)
    assert summary["errors"] == 0
    assert summary["main_after_side"]["misses"] == 0


def test_the_sessions_command_replays_a_shape_file(
    stack: tuple[Proc, Proc], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim, gateway = stack
    path = tmp_path / "shape.json"
    path.write_text(dump_shape(generate(PARAMS)))
    argv = ["--url", gateway.url + "/v1", "--shape", str(path), "--time-scale", str(TIME_SCALE)]
    argv += ["--scale", "2", "--sim-urls", sim.url, "--out", str(tmp_path / "out")]
    assert sessions_main(argv) == 0
    assert "| shape.json | main |" in capsys.readouterr().out
    written = json.loads((tmp_path / "out" / "sessions-shape.json").read_text())
    assert written["summary"]["errors"] == 0
    assert written["summary"]["requests"] == 2 * sum(
        len(s.requests) for s in generate(PARAMS).sessions
    )
    assert {r["session"] for r in written["requests"]} >= {"synthetic-3-0", "synthetic-3-0~1"}
