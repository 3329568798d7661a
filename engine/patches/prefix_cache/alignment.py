"""Alignment rules every GLM snapshot, extend prefix and chunk cut must obey (sglang-free)."""

from __future__ import annotations


class SnapshotAlignmentError(AssertionError):
    """A state snapshot or a reused prefix is not on a cache-unit boundary.

    Raised instead of carrying on: an unaligned prefix would make two branches share one
    KPool page and silently overwrite each other's index keys.
    """


def align_down(length: int, unit: int) -> int:
    return length // unit * unit


def check_extend(prefix_len: int, snapshot_len: int | None, unit: int) -> None:
    """An extend may start only at a unit boundary and may snapshot only at one."""
    if prefix_len % unit:
        raise SnapshotAlignmentError(
            f"extend starts after a {prefix_len}-token prefix, not a multiple of {unit}"
        )
    if snapshot_len is not None and snapshot_len % unit:
        raise SnapshotAlignmentError(
            f"state snapshot at {snapshot_len} tokens, not a multiple of {unit}"
        )


def check_tree_key(length: int, unit: int) -> None:
    """Every node that will hold a state ends at a unit boundary."""
    if length % unit:
        raise SnapshotAlignmentError(f"caching a {length}-token prefix, not a multiple of {unit}")


def check_track_slot(track_slot: int, working_slot: int) -> None:
    """A snapshot written into the working slot would be overwritten by the next step."""
    if track_slot == working_slot:
        raise SnapshotAlignmentError(f"snapshot slot {track_slot} is the working slot")


def aligned_chunk_end(prefix_len: int, chunk_end: int, unit: int) -> int | None:
    """Where a chunked prefill that would stop at `chunk_end` must stop instead.

    `None` when not even one unit fits after the prefix (the chunk must wait for budget).
    """
    end = align_down(chunk_end, unit)
    return end if end > prefix_len else None


def conv_window_starts(
    query_starts: list[int], prefix_lens: list[int], snapshot_lens: list[int], window: int
) -> list[int]:
    """Packed-token index of the first conv input kept by each snapshot.

    A snapshot at length L keeps inputs L-window .. L-1; in the packed extend batch, request i's
    token at absolute position p sits at query_starts[i] + (p - prefix_lens[i]).
    """
    return [
        start + (snap - prefix) - window
        for start, prefix, snap in zip(query_starts, prefix_lens, snapshot_lens, strict=True)
    ]
