"""One real opencode turn through the scripted recorder gives the expected shape (skipped
without npm; slow: the first use downloads the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.core.reasoning_codec import ReasoningCodec
from gateway.settings import Settings
from scripts import session_shape
from scripts.record_agent_requests import serving
from scripts.record_session_shape import CLIENTS, FILES, SURVEY, plans
from scripts.session_shape import Pseudonyms, bundled_renderer, parse_record
from tests.support.npm_cli import INSTALL_TIMEOUT_S
from tests.support.opencode_cli import opencode_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(INSTALL_TIMEOUT_S + 120)]


def test_opencode_turn_has_a_title_side_request_and_two_subagents(tmp_path: Path) -> None:
    opencode = opencode_or_skip()
    client = CLIENTS["opencode"]
    work, home, raw = tmp_path / "work", tmp_path / "home", tmp_path / "raw"
    work.mkdir()
    for name, text in FILES.items():
        (work / name).write_text(text)
    with serving(
        raw, {"name": "unused", "input": {}}, plans(client.tools(work), client.compaction)
    ) as server:
        env = client.env(home, server.url, client.sessions[0])
        client.turn(opencode, env, work, SURVEY, None)
    records = [json.loads(path.read_text()) for path in sorted(raw.glob("*.json"))]
    codec = ReasoningCodec.with_random_key(max_age_s=60.0, max_text_bytes=1 << 20)
    renderer, settings = bundled_renderer(), Settings()
    parsed = [p for r in records if (p := parse_record(r, renderer, codec, settings))]
    shape = session_shape.shape_session(parsed, Pseudonyms(), {})
    kinds = [(r["kind"], r["lineage"]) for r in shape]
    assert ("side", "side:1") in kinds  # the title
    assert {lineage for kind, lineage in kinds if kind == "subagent"} == {"agent:1", "agent:2"}
    mains = [r for r in shape if r["kind"] == "main"]
    assert mains[0]["extends"] is None
    assert all(r["extends"] is not None for r in mains[1:])
    assert sum(r["tool_calls"] for r in mains) == 4  # read, two tasks, the listing
