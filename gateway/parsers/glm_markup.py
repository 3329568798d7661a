"""GLM's output markup: the tags and the tag sets each parser state looks for."""

from __future__ import annotations

from gateway.parsers.scan import TagSet

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"

NAME_TAGS = TagSet([KEY_OPEN, CALL_CLOSE, "\n"])
ARGS_TAGS = TagSet([KEY_OPEN, CALL_CLOSE])
KEY_TAGS = TagSet([KEY_CLOSE, VALUE_OPEN, CALL_CLOSE])
AFTER_KEY_TAGS = TagSet([VALUE_OPEN, VALUE_CLOSE, KEY_OPEN, CALL_CLOSE])
VALUE_TAGS = TagSet([VALUE_CLOSE])
REJECTED_TAGS = TagSet([CALL_CLOSE])
# Reasoning and content look for the same two tags (in the order each state prefers).
REASONING_TAGS = TagSet([THINK_CLOSE, CALL_OPEN])
CONTENT_TAGS = TagSet([CALL_OPEN, THINK_CLOSE])
# With no callable tools a `<tool_call>` is text: only `</think>` is markup.
TEXT_ONLY_TAGS = TagSet([THINK_CLOSE])
