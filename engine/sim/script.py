"""Scripted answers (`--script FILE`): the simulated model follows a plan instead of chance.

Real agent CLIs take their long paths (tool rounds, subagents, compaction, resume) only when the
model asks for them; a script makes it ask on purpose, so a test can walk a CLI through a
session of many turns in seconds. Random answers stay the default.

The file (YAML, or JSON) lists rules:

    max_calls: 200                 # every scripted call spends one; then only text answers
    rules:
      - when: "Read notes.txt"      # text of a user turn that starts this plan
        steps:                      # one assistant turn each: the calls it makes together
          - [{name: Read, arguments: {file_path: /w/notes.txt}}]
          - [{name: Agent, arguments: {prompt: "Check todo.txt"}},
             {name: Agent, arguments: {prompt: "Summarise notes.txt"}}]
        final: "Done."              # the text once the steps are done (default: random words)
      - when_no_tools: true         # a request that offers no tools (compaction, titles)
        final: "<summary>...</summary>"
      - final: "Plain answer."      # no condition: the default

Which rule and step a request is at is read from its prompt alone, so the simulator keeps no
per-conversation state and any replica answers alike: the rule is the one whose `when` text
stands latest in a user turn of the prompt (a resumed session's new prompt wins over the old
ones; the text in an assistant's call arguments or a tool's output does not count), and the
step is the number of assistant turns with tool calls after that text. A step's calls whose
tool the prompt does not offer are left out (a subagent lacks the agent tool); when none is
left, or the steps are done, the answer is the final text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from engine.sim.tools import find_tools

USER = "<|user|>"
ASSISTANT = "<|assistant|>"
TOOL_CALL = "<tool_call>"
# Any role token ends a turn (FACTS.md: no end-of-turn token).
_ROLE = re.compile(r"<\|(?:system|user|assistant|observation)\|>")
MAX_RULES = 256
MAX_STEPS = 64
MAX_CALLS_PER_STEP = 16


class ScriptError(ValueError):
    """The script file is not a script; the message says where."""


@dataclass(frozen=True)
class ScriptCall:
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Rule:
    when: str | None
    when_no_tools: bool
    steps: tuple[tuple[ScriptCall, ...], ...]
    final: str | None


@dataclass(frozen=True)
class Answer:
    """What one request gets: calls (possibly none) or, when there are none, `final`."""

    calls: tuple[tuple[str, dict[str, Any]], ...]
    final: str | None


class Script:
    """The rules plus the server-wide call budget (the only state, so a client that restarts
    its conversation forever still gets text answers in the end)."""

    def __init__(self, rules: Sequence[Rule], max_calls: int) -> None:
        self.rules = tuple(rules)
        self.calls_left = max_calls

    def answer(self, prompt: str) -> Answer:
        rule, start = self._rule(prompt)
        if rule is None:
            return Answer((), None)
        step = _tool_turns_after(prompt, start)
        offered = {tool.name for tool in find_tools(prompt)}
        if step < len(rule.steps) and self.calls_left > 0:
            calls = [c for c in rule.steps[step] if c.name in offered][: self.calls_left]
            if calls:
                self.calls_left -= len(calls)
                return Answer(tuple((c.name, dict(c.arguments)) for c in calls), None)
        return Answer((), rule.final)

    def _rule(self, prompt: str) -> tuple[Rule | None, int]:
        users = _user_turns(prompt)
        no_tools = not find_tools(prompt)
        best: tuple[Rule | None, int] = (None, -1)
        fallback: Rule | None = None
        for rule in self.rules:
            if rule.when_no_tools:
                if no_tools:
                    return rule, users[-1][0] if users else 0
                continue
            if rule.when is None:
                fallback = fallback or rule
                continue
            for begin, end in reversed(users):
                found = prompt.rfind(rule.when, begin, end)
                if found >= 0:
                    if found > best[1]:
                        best = (rule, found)
                    break
        if best[0] is not None:
            return best
        return fallback, users[-1][0] if users else 0


def _turns(prompt: str, role: str, start: int = 0) -> Iterator[tuple[int, int]]:
    """(start, end) of the text of each turn of `role` from `start` on."""
    at = prompt.find(role, start)
    while at >= 0:
        begin = at + len(role)
        following = _ROLE.search(prompt, begin)
        end = following.start() if following else len(prompt)
        yield begin, end
        at = prompt.find(role, end)


def _user_turns(prompt: str) -> list[tuple[int, int]]:
    return list(_turns(prompt, USER))


def _tool_turns_after(prompt: str, start: int) -> int:
    """Assistant turns after `start` that make tool calls."""
    return sum(
        1
        for begin, end in _turns(prompt, ASSISTANT, start)
        if prompt.find(TOOL_CALL, begin, end) >= 0
    )


def _call(raw: Any, where: str) -> ScriptCall:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
        raise ScriptError(f"{where}: a call is an object with a name")
    arguments = raw.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ScriptError(f"{where}.arguments: an object")
    return ScriptCall(raw["name"], arguments)


def _rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise ScriptError(f"{where}: a rule is an object")
    unknown = set(raw) - {"when", "when_no_tools", "steps", "final"}
    if unknown:
        raise ScriptError(f"{where}: unknown keys {sorted(unknown)}")
    when, final = raw.get("when"), raw.get("final")
    if when is not None and (not isinstance(when, str) or not when):
        raise ScriptError(f"{where}.when: a non-empty string")
    if final is not None and not isinstance(final, str):
        raise ScriptError(f"{where}.final: a string")
    steps = raw.get("steps", [])
    if not isinstance(steps, list) or len(steps) > MAX_STEPS:
        raise ScriptError(f"{where}.steps: a list of at most {MAX_STEPS} steps")
    parsed = []
    for i, step in enumerate(steps):
        if not isinstance(step, list) or not 0 < len(step) <= MAX_CALLS_PER_STEP:
            raise ScriptError(f"{where}.steps.{i}: 1 to {MAX_CALLS_PER_STEP} calls")
        parsed.append(tuple(_call(c, f"{where}.steps.{i}.{j}") for j, c in enumerate(step)))
    return Rule(when, bool(raw.get("when_no_tools", False)), tuple(parsed), final)


def parse_script(document: Any) -> Script:
    if not isinstance(document, dict):
        raise ScriptError("a script is an object with `rules`")
    rules = document.get("rules")
    if not isinstance(rules, list) or not 0 < len(rules) <= MAX_RULES:
        raise ScriptError(f"rules: a list of 1 to {MAX_RULES} rules")
    max_calls = document.get("max_calls", 200)
    if not isinstance(max_calls, int) or max_calls < 0:
        raise ScriptError("max_calls: an integer >= 0")
    return Script([_rule(r, f"rules.{i}") for i, r in enumerate(rules)], max_calls)


def load_script(path: Path) -> Script:
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ScriptError(f"{path}: {exc}") from None
    return parse_script(document)
