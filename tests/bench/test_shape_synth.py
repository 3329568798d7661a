"""The synthetic Claude-Code-shaped sessions (bench.shape_synth): deterministic by seed, and
the structure its parameters advertise."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from bench.shape_synth import (
    AGENT_HEADER,
    CLASS_HEADER,
    COMPACTED_HEADER,
    SESSION_HEADER,
    SyntheticParams,
    generate,
)
from bench.shapes import ShapeSession, dump_shape, parse_shape

PARAMS = SyntheticParams(
    sessions=3,
    turns=7,
    subagents=3,
    subagents_at_once=2,
    subagent_turns=2,
    side_requests=3,
    compact_after=3,
    projects=2,
    seed=5,
)


def _lineages(session: ShapeSession, kind: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, r in enumerate(session.requests):
        if r.kind == kind:
            out.setdefault(r.lineage, []).append(i)
    return out


def test_the_same_seed_gives_the_same_shape_and_another_seed_another() -> None:
    assert dump_shape(generate(PARAMS)) == dump_shape(generate(PARAMS))
    assert dump_shape(generate(replace(PARAMS, seed=6))) != dump_shape(generate(PARAMS))


def test_the_shape_passes_the_loader() -> None:
    shape = generate(PARAMS)
    assert parse_shape(dump_shape(shape)) == shape
    assert shape.client == "synthetic"
    assert shape.api == "anthropic"
    assert len(shape.sessions) == PARAMS.sessions
    assert len({s.id for s in shape.sessions}) == PARAMS.sessions


@pytest.mark.parametrize("index", range(PARAMS.sessions))
def test_each_session_has_the_advertised_structure(index: int) -> None:
    session = generate(PARAMS).sessions[index]
    requests = session.requests
    assert requests[0].at_s == 0.0
    assert [r.at_s for r in requests] == sorted(r.at_s for r in requests)
    # Main conversation: 7 turns, compacted after every 3: main, main#2, main#3; each
    # compaction adds one request (the summary) to the lineage it ends.
    mains = _lineages(session, "main")
    assert list(mains) == ["main", "main#2", "main#3"]
    assert sum(len(v) for v in mains.values()) == PARAMS.turns + 2
    for name, indices in mains.items():
        first = requests[indices[0]]
        assert first.extends is None
        assert first.compacted == (name != "main")
        assert (COMPACTED_HEADER in first.headers) == (name != "main")
        assert first.head == f"project:{index % PARAMS.projects}"
        assert first.head_tokens == PARAMS.head_tokens
        for previous, current in itertools.pairwise(indices):
            assert requests[current].extends == previous  # a chain, each turn on the last
    # Subagents: 3, each 2 turns on its own agent id, a group of 2 started together.
    agents = _lineages(session, "subagent")
    assert len(agents) == PARAMS.subagents
    assert all(len(v) == PARAMS.subagent_turns for v in agents.values())
    ids = {requests[v[0]].agent_id for v in agents.values()}
    assert len(ids) == PARAMS.subagents
    for indices in agents.values():
        root = requests[indices[0]]
        assert root.headers[AGENT_HEADER] == root.agent_id
        assert root.head.startswith(f"project:{index % PARAMS.projects}:agent:")
    starts = sorted(requests[v[0]].at_s for v in agents.values())
    assert starts[1] - starts[0] < 1.0  # the first two run at once
    # Side requests: 3 roots on small heads without tool calls, the first with the first turn.
    sides = _lineages(session, "side")
    assert len(sides) == PARAMS.side_requests
    assert all(len(v) == 1 and requests[v[0]].extends is None for v in sides.values())
    assert all(requests[v[0]].tool_calls == 0 for v in sides.values())
    assert requests[sides["side:1"][0]].head == "side:title"
    # One session id on every request; Claude Code's request classes (its hint headers).
    assert {r.headers[SESSION_HEADER] for r in requests} == {session.id}
    classes = [r.headers[CLASS_HEADER] for r in requests]
    assert classes.count("compaction") == len(mains) - 1
    assert classes.count("auxiliary") == PARAMS.side_requests
    assert classes.count("subagent") == PARAMS.subagents * PARAMS.subagent_turns


def test_sessions_of_one_project_share_its_head() -> None:
    shape = generate(PARAMS)
    heads = [s.requests[0].head for s in shape.sessions]
    assert heads == ["project:0", "project:1", "project:0"]


def test_parameters_that_do_not_fit_are_refused() -> None:
    with pytest.raises(ValueError, match="too few"):
        generate(replace(PARAMS, turns=2, subagents=6, subagents_at_once=1))
    with pytest.raises(ValueError, match="must be >= 1"):
        generate(replace(PARAMS, sessions=0))
