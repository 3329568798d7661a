"""Finding markup tags in streamed text without rescanning what was already seen.

A parser keeps only the unconsumed tail of the output; `TagSet.find` looks for the earliest
tag from a position, and `TagSet.hold_from` says where a possible tag prefix starts at the
end (that part must wait for the next chunk).
"""

from __future__ import annotations

from collections.abc import Sequence


class TagSet:
    """A fixed set of tags; every multi-character tag starts with "<" and has no other "<"."""

    __slots__ = ("_longest", "_prefixes", "tags")

    def __init__(self, tags: Sequence[str]) -> None:
        for tag in tags:
            if len(tag) > 1 and (not tag.startswith("<") or "<" in tag[1:]):
                raise ValueError(f"tag {tag!r}: multi-character tags start with '<' only")
        self.tags = tuple(tags)
        self._longest = max((len(t) for t in tags), default=1)
        self._prefixes = frozenset(t[:k] for t in tags for k in range(1, len(t)))

    def find(self, text: str, start: int, memo: dict[str, int]) -> tuple[int, str] | None:
        """Earliest (index, tag) at or after `start`, or None.

        `memo` maps a tag to its next index in `text` (len(text): none) as found before; the
        caller empties it whenever `text` changes. With it, text between many tags of one
        kind is not searched again for the other kinds, so a whole text costs O(len * tags).
        """
        best: tuple[int, str] | None = None
        for tag in self.tags:
            index = memo.get(tag, -1)
            if index < start:
                index = text.find(tag, start)
                if index == -1:
                    index = len(text)
                memo[tag] = index
            if index < len(text) and (best is None or index < best[0]):
                best = (index, tag)
        return best

    def hold_from(self, text: str, start: int) -> int:
        """First index of a trailing proper prefix of a tag (len(text) when there is none)."""
        lower = max(start, len(text) - self._longest + 1)
        index = text.rfind("<", lower)
        if index != -1 and text[index:] in self._prefixes:
            return index
        return len(text)
