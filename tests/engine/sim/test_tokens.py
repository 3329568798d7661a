from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine.sim.checkpoints import CheckpointPool
from engine.sim.tokens import (
    from_ids,
    from_text,
    piece_id,
    prefix_key,
    prefix_keys,
    split_pieces,
    token_ids,
)


def test_text_token_count_is_ceil_of_bytes() -> None:
    assert from_text("", 4).count == 0
    assert from_text("abcd", 4).count == 1
    assert from_text("abcde", 4).count == 2
    assert from_text("é" * 3, 4).count == 2  # 6 bytes


@given(st.text(), st.text())
def test_prefix_stable(a: str, b: str) -> None:
    whole = from_text(a + b, 4)
    head = from_text(a, 4)
    full = head.full_tokens
    if full:
        assert prefix_key(whole, full) == prefix_key(head, full)


def test_ascii_text_and_its_chunk_ids_share_keys() -> None:
    text = "abcdefgh" * 64  # 128 tokens
    ids = [piece_id(text[i : i + 4]) for i in range(0, len(text), 4)]
    assert list(prefix_keys(from_text(text, 4), 32, 128)) == list(
        prefix_keys(from_ids(ids), 32, 128)
    )


def test_token_ids_of_ascii_text_are_its_chunk_ids() -> None:
    text = "abcdefgh" * 64
    ids = token_ids(from_text(text, 4))
    assert ids == [piece_id(text[i : i + 4]) for i in range(0, len(text), 4)]
    assert list(prefix_keys(from_ids(ids), 32, 128)) == list(
        prefix_keys(from_text(text, 4), 32, 128)
    )


@given(st.text(), st.integers(min_value=1, max_value=8))
def test_one_token_id_per_counted_token(text: str, size: int) -> None:
    seq = from_text(text, size)
    assert len(token_ids(seq)) == seq.count


@given(st.text(max_size=200), st.integers(min_value=1, max_value=8))
def test_split_pieces_round_trips_and_respects_size(text: str, size: int) -> None:
    pieces = split_pieces(text, size)
    assert "".join(pieces) == text
    assert all(len(p.encode()) <= max(size, 4) for p in pieces)
    assert all(p for p in pieces)


def test_pool_finds_longest_checkpoint_and_leaves_one_token() -> None:
    pool = CheckpointPool(slots=8, track_interval=4)
    base = "x" * 4 * 10  # 10 tokens: boundary at 8
    assert pool.save(from_text(base, 4)) is not None
    assert pool.lookup(from_text(base + "yyyy" * 5, 4)) == 8
    assert pool.lookup(from_text("z" + base, 4)) == 0
    # A prompt exactly at the boundary still computes its last token.
    assert pool.lookup(from_text("x" * 32, 4)) == 0


def test_pool_evicts_least_recently_used() -> None:
    pool = CheckpointPool(slots=2, track_interval=1)
    a, b, c = (from_text(ch * 8, 4) for ch in "abc")
    pool.save(a)
    pool.save(b)
    assert pool.lookup(from_text("a" * 12, 4)) == 2  # touch a
    pool.save(c)  # evicts b
    assert pool.lookup(from_text("b" * 12, 4)) == 0
    assert pool.lookup(from_text("a" * 12, 4)) == 2
    assert pool.evictions == 1
    assert len(pool) == 2
