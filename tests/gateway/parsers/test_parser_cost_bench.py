"""The parser-cost benchmark runs and its synthetic outputs are what it says (no timing)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from bench import parser_cost
from gateway.parsers.registry import get_parser_factory
from tests.gateway.parsers.support import assemble


def _parse(tokens: list[str]) -> tuple[int, list[object]]:
    factory = get_parser_factory(parser_cost.FAMILY)
    parser = factory(tools=parser_cost.TOOLS, tool_choice="auto", starts_in_reasoning=True)
    deltas = [d for token in tokens for d in parser.feed(token)] + parser.finish()
    result = assemble(deltas)
    return len(result.calls), result.arguments()


def test_scenarios_produce_the_intended_outputs() -> None:
    rng = random.Random(1)
    assert _parse(parser_cost._reasoning_content(rng, 300))[0] == 0
    calls, arguments = _parse(parser_cost._many_calls(rng, 300))
    assert calls > 10
    assert arguments[0] == {"city": "San Francisco", "days": 14}
    _, (written,) = _parse(parser_cost._long_string(rng, 300))
    assert isinstance(written, dict)
    assert len(written["content"]) > 300
    _, (stored,) = _parse(parser_cost._long_json(rng, 300))
    assert isinstance(stored, dict)
    assert stored["doc"]["items"][-1] == "end"


def test_report_writes_rows_and_a_markdown_table(tmp_path: Path) -> None:
    rows = parser_cost.measure([200, 400], repeats=1)
    assert {r["scenario"] for r in rows} == set(parser_cost.SCENARIOS)
    assert all(r["us_per_token"] > 0 for r in rows)
    assert parser_cost.main(["--tokens", "200", "--repeats", "1", "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "parser_cost.json").read_text())
    assert len(saved) == len(parser_cost.SCENARIOS)
    assert "| many calls |" in parser_cost._markdown(rows, 1)
