"""Cumulative engine text -> deltas, in O(delta) per event.

SGLang repeats the whole output so far in every stream event. `TextDiffer` never compares the
whole text again, only a short window before the part already sent, and it holds back a
trailing U+FFFD (the detokenizer's mark for an incomplete multi-byte character) until the
character is complete, so a character is never split across chunks.
"""

from __future__ import annotations

_REPLACEMENT = "\ufffd"


class TextDiffer:
    """Cumulative text -> new text since the last call, O(len(delta)) per call."""

    __slots__ = ("_incremental", "_sent", "_window", "rewrites")

    # How much already-sent text is re-checked on each event to catch an engine that rewrote
    # its output (it should never happen; if it does we must not send garbage silently).
    WINDOW = 16

    def __init__(self, *, incremental: bool = False) -> None:
        self._incremental = incremental
        self._sent = 0
        self._window = ""
        self.rewrites = 0

    def push(self, text: str) -> str:
        if self._incremental:
            return self._hold_back(self._window + text, 0)
        sent = self._sent
        if len(text) < sent or (sent and text[sent - len(self._window) : sent] != self._window):
            # Already-sent text cannot be taken back: keep our position and go on from there.
            self.rewrites += 1
        return self._hold_back(text, sent)

    def _hold_back(self, text: str, start: int) -> str:
        end = len(text)
        while end > start and text[end - 1] == _REPLACEMENT:
            end -= 1
        if end <= start:
            if self._incremental:
                self._window = text[start:]
            return ""
        delta = text[start:end]
        if self._incremental:
            self._window = text[end:]
        else:
            self._sent = end
            self._window = text[max(0, end - self.WINDOW) : end]
        return delta

    def finish(self, text: str | None = None) -> str:
        """The stream ended: whatever was held back is final (a real U+FFFD, then)."""
        if self._incremental:
            rest = self._window + (text or "")
            self._window = ""
            return rest
        if text is None or len(text) <= self._sent:
            return ""
        delta = text[self._sent :]
        self._sent = len(text)
        return delta
