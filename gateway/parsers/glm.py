"""Reasoning and tool-call parser for GLM output (GLM-4.7/5.x and the GLM-4.5/4.6 variant).

Output after the generation prompt `<|assistant|><think>`:
`REASONING</think>CONTENT<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`;
GLM-4.5/4.6 put a newline after the name and after each part. Both spellings parse the same.

Decisions (streamed and one-shot output are identical for every split of the text):
- Reasoning ends at `</think>` or at a `<tool_call>` (a call written while thinking is a call).
  Output that ends without `</think>` is all reasoning: that is what was streamed, and a cut-off
  thought is still a thought. A leading `<think>` is accepted and dropped. Reasoning is kept
  byte-exact (it is sent back verbatim in the next turn and must match the engine's cache).
- A stray `</think>` in content is markup, not text: it is dropped.
- Content is the text outside markup with its leading and trailing whitespace removed
  (whitespace is held back until non-blank text follows; whitespace around calls is dropped).
- A call is emitted only once its name is complete (never a truncated name) and declared;
  otherwise the markup stays in the content verbatim and is reported in `rejected_tool_calls`.
- Arguments: a string-typed value streams as it arrives; any other value is typed from the
  schema at `</arg_value>`. A missing `<arg_value>` is recovered when `</arg_value>` closes the
  value; a key with no value, a value that cannot have the schema's type, a value cut off by
  the end of the output (except an already streamed string, which keeps what arrived), an
  over-long key or value and text between arguments are dropped. Nothing is ever invented:
  a call with nothing usable is `{}`.
- Inside a value only `</arg_value>` ends it, so values may contain any other markup.
- With no callable tools (none declared, or tool_choice "none") markup is plain text.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.parsers.arguments import ArgumentsWriter
from gateway.parsers.base import (
    ParsedDelta,
    ReasoningDelta,
    RejectedToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
)
from gateway.parsers.glm_markup import (
    AFTER_KEY_TAGS,
    ARGS_TAGS,
    CALL_CLOSE,
    CALL_OPEN,
    CONTENT_TAGS,
    KEY_CLOSE,
    KEY_OPEN,
    KEY_TAGS,
    NAME_TAGS,
    REASONING_TAGS,
    REJECTED_TAGS,
    TEXT_ONLY_TAGS,
    THINK_CLOSE,
    THINK_OPEN,
    VALUE_CLOSE,
    VALUE_OPEN,
    VALUE_TAGS,
)
from gateway.parsers.stream_core import ParserLimits, StreamCore, random_call_id
from gateway.parsers.tools import ToolSet


class _State(enum.Enum):
    START = enum.auto()
    REASONING = enum.auto()
    CONTENT = enum.auto()
    NAME = enum.auto()
    ARGS = enum.auto()
    KEY = enum.auto()
    AFTER_KEY = enum.auto()
    VALUE_STRING = enum.auto()
    VALUE_BUFFERED = enum.auto()
    VALUE_SKIPPED = enum.auto()
    REJECTED = enum.auto()


class GlmOutputParser(StreamCore):
    def __init__(
        self,
        tools: ToolSet,
        *,
        starts_in_reasoning: bool,
        limits: ParserLimits,
        new_call_id: Callable[[], str],
    ) -> None:
        super().__init__()
        self._tools = tools
        self._starts_in_reasoning = starts_in_reasoning
        self._limits = limits
        self._new_call_id = new_call_id
        calls = tools.parses_calls
        self._reasoning_tags = REASONING_TAGS if calls else TEXT_ONLY_TAGS
        self._content_tags = CONTENT_TAGS if calls else TEXT_ONLY_TAGS
        self._state = _State.START
        self._key: str | None = None
        self._args: ArgumentsWriter | None = None
        self._index = 0
        self._rejected: list[RejectedToolCall] = []

    @property
    def made_tool_calls(self) -> bool:
        return self._index > 0 or self._args is not None

    @property
    def rejected_tool_calls(self) -> Sequence[RejectedToolCall]:
        return tuple(self._rejected)

    def feed(self, text: str) -> list[ParsedDelta]:
        # The usual chunk: plain text in reasoning or content with nothing held back. Every
        # tag of those states starts with "<", so a scan would find none and hold nothing
        # back: emit it as the scan would, without the state machine (the per-token path).
        if "<" not in text and not self._buf and text and not self._finished:
            state = self._state
            if state is _State.REASONING:
                return [ReasoningDelta(text)]
            if state is _State.CONTENT:
                self._out = []
                self._emit_content(text)
                return self._out
        return super().feed(text)

    def _step(self, final: bool) -> bool:
        return _STEPS[self._state](self, final)

    def _reset_to(self, state: _State) -> None:
        self._reset_acc()
        self._state = state

    def _emit_arguments(self, fragment: str) -> None:
        self._out.append(ToolCallArgumentsDelta(self._index, fragment))

    # --- states: each returns True to run again, False to wait for more text ---

    def _start(self, final: bool) -> bool:
        rest = self._buf[self._pos :]
        if rest.startswith(THINK_OPEN):
            self._pos += len(THINK_OPEN)
            self._state = _State.REASONING
            return True
        if not final and THINK_OPEN.startswith(rest):
            return False
        self._state = _State.REASONING if self._starts_in_reasoning else _State.CONTENT
        return True

    def _reasoning(self, final: bool) -> bool:
        text, tag = self._scan(self._reasoning_tags, final)
        self._emit_reasoning(text)
        if tag == THINK_CLOSE:
            self._state = _State.CONTENT
        elif tag == CALL_OPEN:
            self._reset_to(_State.NAME)
        return tag is not None

    def _content(self, final: bool) -> bool:
        text, tag = self._scan(self._content_tags, final)
        self._emit_content(text)
        if tag == CALL_OPEN:
            self._reset_to(_State.NAME)
        return tag is not None

    def _name(self, final: bool) -> bool:
        text, tag = self._scan(NAME_TAGS, final)
        rescan = False
        if tag == "\n" and self._acc_blank and not text.strip():
            # A newline before any name character is layout, not the end of the name.
            text, tag, rescan = text + tag, None, True
        if self._acc_len + len(text) > self._limits.max_name_chars:
            self._reject_name(text, tag, "malformed")
            return True
        self._accumulate(text, self._limits.max_name_chars)
        if tag is not None:
            self._end_name(tag)
            return True
        if final:
            self._reject_name("", None, "malformed")
            return True
        return rescan

    def _end_name(self, tag: str) -> None:
        name = "".join(self._acc).strip()
        if not name:
            self._reject_name("", tag, "malformed")
            return
        reason = self._tools.rejection(name)
        if reason is not None:
            self._reject_name("", tag, reason)
            return
        self._out.append(ToolCallStart(self._index, self._new_call_id(), name))
        self._args = ArgumentsWriter(self._tools.schemas[name])
        if tag == CALL_CLOSE:
            self._close_call()
        elif tag == KEY_OPEN:
            self._reset_to(_State.KEY)
        else:
            self._state = _State.ARGS

    def _reject_name(self, more: str, tag: str | None, reason: str) -> None:
        written = "".join(self._acc) + more
        bound = self._limits.max_name_chars
        self._rejected.append(RejectedToolCall(written[:bound].strip(), reason))
        self._emit_content(CALL_OPEN + written + (tag or ""))
        self._state = _State.CONTENT if tag == CALL_CLOSE else _State.REJECTED

    def _close_call(self) -> None:
        if self._args is not None:
            self._emit_arguments(self._args.close())
            self._index += 1
            self._args = None
        self._state = _State.CONTENT

    def _between_args(self, final: bool) -> bool:
        _, tag = self._scan(ARGS_TAGS, final)
        if tag == KEY_OPEN:
            self._reset_to(_State.KEY)
        elif tag == CALL_CLOSE or final:
            self._close_call()
        return tag is not None or final

    def _arg_key(self, final: bool) -> bool:
        text, tag = self._scan(KEY_TAGS, final)
        self._accumulate(text, self._limits.max_key_chars)
        if tag is None:
            if final:
                self._close_call()
            return final
        if tag == CALL_CLOSE:
            self._close_call()
        elif self._acc_len > self._limits.max_key_chars:
            self._state = _State.ARGS
        else:
            self._key = "".join(self._acc).strip() or None
            if tag == KEY_CLOSE:
                self._reset_to(_State.AFTER_KEY)
            else:
                self._begin_value()
        return True

    def _after_key(self, final: bool) -> bool:
        text, tag = self._scan(AFTER_KEY_TAGS, final)
        self._accumulate(text, self._limits.max_value_chars)
        if tag == VALUE_OPEN:
            self._begin_value()
        elif tag == VALUE_CLOSE:
            # `<arg_value>` went missing but the value is closed: the text in between is it.
            self._write_whole_value("".join(self._acc).lstrip())
            self._state = _State.ARGS
        elif tag == KEY_OPEN:
            self._reset_to(_State.KEY)
        elif tag == CALL_CLOSE or final:
            self._close_call()
        return tag is not None or final

    def _begin_value(self) -> None:
        key, args = self._key, self._args
        if key is None or args is None or not args.accepts(key):
            self._state = _State.VALUE_SKIPPED
        elif args.value_type(key).is_plain_string:
            self._emit_arguments(args.begin_string(key))
            self._state = _State.VALUE_STRING
        else:
            self._reset_to(_State.VALUE_BUFFERED)

    def _write_whole_value(self, raw: str) -> None:
        key, args = self._key, self._args
        if self._acc_len > self._limits.max_value_chars or key is None or args is None:
            return
        fragment = args.whole_value(key, raw) if args.accepts(key) else None
        if fragment is not None:
            self._emit_arguments(fragment)

    def _string_value(self, final: bool) -> bool:
        text, tag = self._scan(VALUE_TAGS, final)
        if text:
            self._emit_arguments(ArgumentsWriter.string_piece(text))
        if tag is None and not final:
            return False
        self._emit_arguments(ArgumentsWriter.end_string())
        if tag is None:
            self._close_call()
        else:
            self._state = _State.ARGS
        return True

    def _buffered_value(self, final: bool) -> bool:
        text, tag = self._scan(VALUE_TAGS, final)
        self._accumulate(text, self._limits.max_value_chars)
        if tag is not None:
            self._write_whole_value("".join(self._acc))
            self._state = _State.ARGS
        elif final:
            self._close_call()
        return tag is not None or final

    def _skipped_value(self, final: bool) -> bool:
        _, tag = self._scan(VALUE_TAGS, final)
        if tag is not None:
            self._state = _State.ARGS
        elif final:
            self._close_call()
        return tag is not None or final

    def _rejected_call(self, final: bool) -> bool:
        text, tag = self._scan(REJECTED_TAGS, final)
        self._emit_content(text + (tag or ""))
        if tag is not None:
            self._state = _State.CONTENT
        return tag is not None


# Unbound, so a parser holds no cycle through its own bound methods (freed without the GC).
_STEPS: dict[_State, Callable[[GlmOutputParser, bool], bool]] = {
    _State.START: GlmOutputParser._start,
    _State.REASONING: GlmOutputParser._reasoning,
    _State.CONTENT: GlmOutputParser._content,
    _State.NAME: GlmOutputParser._name,
    _State.ARGS: GlmOutputParser._between_args,
    _State.KEY: GlmOutputParser._arg_key,
    _State.AFTER_KEY: GlmOutputParser._after_key,
    _State.VALUE_STRING: GlmOutputParser._string_value,
    _State.VALUE_BUFFERED: GlmOutputParser._buffered_value,
    _State.VALUE_SKIPPED: GlmOutputParser._skipped_value,
    _State.REJECTED: GlmOutputParser._rejected_call,
}


class GlmParserFactory:
    """A `ParserFactory` for the GLM markup; bounds and the call-id source are injectable."""

    def __init__(
        self,
        *,
        limits: ParserLimits | None = None,
        new_call_id: Callable[[], str] = random_call_id,
    ) -> None:
        self._limits = limits or ParserLimits()
        self._new_call_id = new_call_id

    def __call__(
        self,
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: str | Mapping[str, Any] | None,
        starts_in_reasoning: bool,
    ) -> GlmOutputParser:
        return GlmOutputParser(
            ToolSet.from_request(tools, tool_choice),
            starts_in_reasoning=starts_in_reasoning,
            limits=self._limits,
            new_call_id=self._new_call_id,
        )
