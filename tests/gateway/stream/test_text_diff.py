"""TextDiffer: cumulative engine text -> deltas, never re-sending, never splitting a character."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.stream.text_diff import TextDiffer


def test_deltas_from_cumulative_text() -> None:
    differ = TextDiffer()
    assert [differ.push(t) for t in ["a", "ab", "abc", "abc"]] == ["a", "b", "c", ""]
    assert differ.finish("abc") == ""


def test_trailing_replacement_char_is_held_until_complete() -> None:
    differ = TextDiffer()
    assert differ.push("caf\ufffd") == "caf"
    assert differ.push("café") == "é"


def test_replacement_char_at_the_end_is_real() -> None:
    differ = TextDiffer()
    assert differ.push("x\ufffd") == "x"
    assert differ.finish("x\ufffd") == "\ufffd"


def test_rewritten_prefix_is_counted_not_resent() -> None:
    differ = TextDiffer()
    assert differ.push("hello") == "hello"
    assert differ.push("jello world") == " world"
    assert differ.rewrites == 1
    assert differ.push("he") == ""
    assert differ.rewrites == 2


def test_incremental_engine_output() -> None:
    differ = TextDiffer(incremental=True)
    assert differ.push("ab") == "ab"
    assert differ.push("c\ufffd") == "c"
    assert differ.push("d") == "\ufffdd"
    assert differ.finish() == ""


@given(st.lists(st.text(min_size=0, max_size=5), max_size=30))
def test_any_growth_reassembles(pieces: list[str]) -> None:
    differ = TextDiffer()
    text, out = "", []
    for piece in pieces:
        text += piece
        out.append(differ.push(text))
    out.append(differ.finish(text))
    assert "".join(out) == text
