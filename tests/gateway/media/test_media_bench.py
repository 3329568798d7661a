"""The media benchmark runs end to end on tiny images (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import media
from bench.__main__ import SUITES


def test_the_suite_is_registered() -> None:
    assert SUITES["media"] == "bench.media"


def test_measure_and_main_write_rows(tmp_path: Path) -> None:
    result = media.measure([(64, 48)], repeats=1)
    assert {row["content"] for row in result["rows"]} == set(media.CONTENTS)
    assert all(row["cpu_ms"] >= 0 and row["bytes"] > 0 for row in result["rows"])
    assert result["loop_stall"]["images"] == 8
    assert "## Media stage" in media._markdown(result)
    assert media.main(["--sizes", "40x30", "--repeats", "1", "--out", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "media.json").read_text())
    assert written["rows"][0]["size"] == "40x30"
