"""The family-neutral half of a streaming output parser: buffering, tag scanning, emitting.

A subclass implements `_step(final)` as a state machine over `self._buf[self._pos:]`: it calls
`_scan` to consume text up to the next tag of its current state (or up to where a tag might
begin, which waits for the next chunk), emits deltas, and returns True to be stepped again or
False to wait for more text. Only the unconsumed tail is kept between chunks, so the work per
chunk is proportional to the chunk (plus a tag's length).

Content rule shared by the families: content is the text outside markup with leading and
trailing whitespace removed; whitespace is held back until non-blank content follows.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from gateway.parsers.base import ContentDelta, ParsedDelta, ReasoningDelta
from gateway.parsers.scan import TagSet


@dataclass(frozen=True, slots=True)
class ParserLimits:
    """Bounds on what one call may buffer; past them the part is dropped or rejected."""

    max_name_chars: int = 256
    max_key_chars: int = 256
    max_value_chars: int = 1 << 20


def random_call_id() -> str:
    return "call_" + secrets.token_hex(12)


class StreamCore:
    def __init__(self) -> None:
        self._buf = ""
        self._pos = 0
        self._next_tag: dict[str, int] = {}  # TagSet.find's memo for the current _buf
        self._out: list[ParsedDelta] = []
        self._acc: list[str] = []
        self._acc_len = 0
        self._acc_blank = True
        self._held_space: list[str] = []
        self._content_started = False
        self._finished = False

    def _step(self, final: bool) -> bool:
        raise NotImplementedError

    def feed(self, text: str) -> list[ParsedDelta]:
        if self._finished or not text:
            return []
        self._buf = self._buf[self._pos :] + text
        self._pos = 0
        self._next_tag.clear()
        return self._run(final=False)

    def finish(self) -> list[ParsedDelta]:
        if self._finished:
            return []
        out = self._run(final=True)
        self._finished = True
        return out

    def _run(self, *, final: bool) -> list[ParsedDelta]:
        self._out = []
        while self._step(final):
            pass
        self._buf = self._buf[self._pos :]
        self._pos = 0
        self._next_tag.clear()
        return self._out

    def _scan(self, tags: TagSet, final: bool) -> tuple[str, str | None]:
        """Consume up to the next tag (returned with the text before it) or the hold point."""
        buf, start = self._buf, self._pos
        hit = tags.find(buf, start, self._next_tag)
        if hit is not None:
            index, tag = hit
            self._pos = index + len(tag)
            return buf[start:index], tag
        cut = len(buf) if final else tags.hold_from(buf, start)
        self._pos = cut
        return buf[start:cut], None

    def _reset_acc(self) -> None:
        self._acc, self._acc_len, self._acc_blank = [], 0, True

    def _accumulate(self, text: str, bound: int) -> None:
        # Past the bound only the length is kept: the part will be dropped at its end tag,
        # the same decision a one-shot parse makes, so memory stays bounded.
        self._acc_len += len(text)
        if self._acc_len <= bound:
            self._acc.append(text)
            self._acc_blank = self._acc_blank and not text.strip()

    def _emit_reasoning(self, text: str) -> None:
        if text:
            self._out.append(ReasoningDelta(text))

    def _emit_content(self, text: str) -> None:
        if not text:
            return
        if not text.strip():
            if self._content_started:
                self._held_space.append(text)
            return
        if self._content_started:
            lead = "".join(self._held_space)
            self._held_space.clear()
        else:
            text, lead, self._content_started = text.lstrip(), "", True
        body = text.rstrip()
        self._out.append(ContentDelta(lead + body))
        if len(body) < len(text):
            self._held_space.append(text[len(body) :])
