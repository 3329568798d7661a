"""Scripted answers for the recorder (scripts/record_agent_requests.py): several tool rounds.

A `Script` lists steps; a step is the tool calls that one assistant turn makes together (two
`Agent` calls in one step start two subagents at once). `Script.by_prompt` gives other steps to
a user turn whose prompt (the last text of the last user prompt) contains a key: the first
session turn can start two agents, a later one only list files, a subagent only read.

Which step a request is at is read from the request itself, so the server keeps no
per-conversation state: our call ids carry their step (`rec<step>n<index>s<serial>`), and a
request is at step 1 + the highest step among our calls since its last user prompt, or 0.
So each user turn (a resumed session's next prompt), each subagent and each conversation
restarted from a summary walks the script from the top.

A step's calls that the request does not offer are left out (a subagent lacks the `Agent`
tool); when none is left, or the script is done, the answer is the final text. A compaction
request (`Script.compaction` recognises it from the headers and body) gets the summary text.
Every call spends one unit of the server-wide budget `max_calls`: a client that keeps
restarting its conversation (compaction after compaction) still gets text answers in the end.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_OUR_CALL = re.compile(r"rec(\d+)n(\d+)s(\d+)")
FINAL_TEXT = "Done: I looked at the files and the agents reported back."
SIDE_TEXT = "Recorded answer."
# A summary of a realistic length: what the conversation restarts from after compaction.
SUMMARY_TEXT = (
    "<summary>\n"
    + "\n".join(
        f"{n}. The user asked about the notes; the file was read, two agents summarised it, "
        "the folder was listed, and nothing is left to do for this step."
        for n in range(1, 13)
    )
    + "\n</summary>"
)
REASONING_TEXT = "The user wants this done with tools; I will make the next call of the plan."


@dataclass(frozen=True)
class Call:
    """One tool call: its tool's name, its input (an object, or a string for a freeform
    Responses `custom` tool), and the Responses namespace the tool sits in, if any."""

    name: str
    input: Mapping[str, Any] | str
    namespace: str | None = None


Compaction = Callable[[Mapping[str, str], Mapping[str, Any]], bool]


def _never(headers: Mapping[str, str], body: Mapping[str, Any]) -> bool:
    return False


@dataclass(frozen=True)
class Script:
    steps: Sequence[Sequence[Call]]
    by_prompt: Mapping[str, Sequence[Sequence[Call]]] = field(default_factory=dict)
    compaction: Compaction = _never
    max_calls: int = 40
    final_text: str = FINAL_TEXT
    side_text: str = SIDE_TEXT
    summary_text: str = SUMMARY_TEXT


@dataclass(frozen=True)
class Plan:
    """What one answer holds: tool calls with their ids (after a reasoning part), or text."""

    calls: list[tuple[str, Call]]
    text: str | None


def call_id(prefix: str, step: int, index: int, serial: int) -> str:
    return f"{prefix}rec{step:02d}n{index:02d}s{serial:05d}"


def step_after(ids: Iterable[str]) -> int:
    """The step of a request whose conversation holds these call ids since its last prompt."""
    steps = [int(m.group(1)) for m in map(_OUR_CALL.search, ids) if m is not None]
    return max(steps) + 1 if steps else 0


@dataclass
class ScriptRun:
    """A script being served: hands out call ids and spends the call budget (thread-safe)."""

    script: Script
    _serial: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _spent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def plan(
        self,
        prefix: str,
        step: int,
        prompt: str,
        offered: Callable[[Call], bool],
        headers: Mapping[str, str],
        body: Mapping[str, Any],
        has_tools: bool,
    ) -> Plan:
        script = self.script
        if script.compaction(headers, body):
            return Plan([], script.summary_text)
        steps = next(
            (steps for key, steps in script.by_prompt.items() if key in prompt), script.steps
        )
        wanted = [c for c in steps[step] if offered(c)] if step < len(steps) else []
        with self._lock:
            wanted = wanted[: max(0, script.max_calls - self._spent)]
            self._spent += len(wanted)
            serials = [next(self._serial) for _ in wanted]
        if wanted:
            ids = [call_id(prefix, step, n, s) for n, s in enumerate(serials)]
            return Plan(list(zip(ids, wanted, strict=True)), None)
        return Plan([], script.final_text if has_tools else script.side_text)


_GENERATED = frozenset(
    {"text", "thinking", "name", "input", "arguments", "content", "reasoning_content"}
    | {"summary", "tool_calls", "function"}  # containers of the above
)


def output_chars(node: Any) -> int:
    """Characters of what a model generates in an answer: every string under the keys that hold
    generated text (ids, types and signatures are the API's, not the model's)."""
    if isinstance(node, str):
        return len(node)
    if isinstance(node, list):
        return sum(output_chars(item) for item in node)
    if not isinstance(node, dict):
        return 0
    total = 0
    for key, value in node.items():
        if key == "input" and isinstance(value, dict):  # a tool_use's input: its JSON
            total += len(json.dumps(value))
        elif key in _GENERATED:
            total += output_chars(value)
    return total
