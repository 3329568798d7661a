"""The wire diff (scripts/engine_cpu/wire_diff.py): the simulator against the real sglang-kt
server, same requests, key by key. Every difference must be listed in docs/simulator.md's
"Wire diff" table with why it does not matter; anything new fails here, so the simulator is
fixed or the difference is written down. Runs under `make test-engine` (the real engine).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator

import pytest

from scripts.engine_cpu.wire_diff import Difference, diff
from tests.support.engines import Engine
from tests.support.procs import REPO_ROOT, Proc, start_sim

DOC = REPO_ROOT / "docs" / "simulator.md"
_ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \|")


def documented() -> list[tuple[str, str]]:
    """(probe pattern, key pattern) of each row in docs/simulator.md's wire-diff table."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Wire diff", 1)[1].split("\n## ", 1)[0]
    rows: list[tuple[str, str]] = []
    for line in section.splitlines():
        if found := _ROW.match(line):
            rows.append((found.group(1), found.group(2)))
    return rows


def explained(difference: Difference, rows: list[tuple[str, str]]) -> bool:
    key = re.sub(r"^(first_event|last_event)\.", "", difference.key)
    return any(
        fnmatch.fnmatchcase(difference.probe, probe) and fnmatch.fnmatchcase(key, pattern)
        for probe, pattern in rows
    )


def test_the_doc_table_parses() -> None:
    rows = documented()
    assert len(rows) >= 5
    assert explained(Difference("generate", "meta_info.sim.ttft_s", "number", "missing"), rows)


@pytest.fixture(scope="module")
def like_the_engine(engine: Engine) -> Iterator[Proc]:
    """A simulator configured as the real engine reports itself (context, slots, interval)."""
    if engine.is_sim:
        pytest.skip("the wire diff compares the simulator with the real engine (make test-engine)")
    info = engine.server_info
    flags = ["--context-length", str(info["context_length"])]
    flags += ["--max-running-requests", str(info["max_running_requests"])]
    if isinstance(info.get("max_mamba_cache_size"), int):
        flags += ["--checkpoint-slots", str(info["max_mamba_cache_size"])]
    if isinstance(info.get("mamba_track_interval"), int):
        flags += ["--track-interval", str(info["mamba_track_interval"])]
    sim = start_sim(*flags, name="wire-diff", as_launched=True)
    try:
        yield sim
    finally:
        sim.stop()


def test_every_difference_from_the_real_engine_is_documented(
    engine: Engine, like_the_engine: Proc
) -> None:
    differences = diff(like_the_engine.url, engine.url)
    rows = documented()
    unexplained = [d.row() for d in differences if not explained(d, rows)]
    assert not unexplained, (
        "differences from sglang-kt not in docs/simulator.md (fix the simulator or list "
        "them with why they do not matter):\n" + "\n".join(unexplained)
    )
