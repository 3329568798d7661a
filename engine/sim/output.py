"""What the simulated model says: GLM-format reasoning, content and tool calls, per seed.

After a prompt that ends in the generation prompt's `<think>`, the output is
REASONING `</think>` CONTENT then zero or more `<tool_call>...</tool_call>`; after any other
prompt (thinking off, or a plain prompt) it is CONTENT then the calls. The planned text ends
with an end-of-sequence token unless max_new_tokens cuts it first.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from engine.sim.tokens import split_pieces
from engine.sim.tools import Tool, arguments_for, find_tools, render_call

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
REASONING_WORDS = (
    "first",
    "consider",
    "the",
    "request",
    "then",
    "check",
    "each",
    "step",
    "so",
    "that",
    "result",
    "holds",
    "because",
    "we",
    "know",
    "it",
    "and",
    "next",
)
CONTENT_WORDS = (
    "Here",
    "is",
    "the",
    "answer",
    "you",
    "asked",
    "for",
    "with",
    "a",
    "short",
    "note",
    "on",
    "what",
    "changed",
    "and",
    "why",
    "it",
    "works",
)


@dataclass(frozen=True)
class OutputControls:
    """Per-request knobs (custom_params {"sim": {...}}) over the process defaults."""

    reasoning_tokens: int
    content_tokens: int
    tool_calls: int | None  # None: auto (0..max_auto_tool_calls when the prompt lists tools)
    max_auto_tool_calls: int
    tool_call_list: tuple[tuple[str, dict[str, Any]], ...] | None = None
    verbatim: str | None = None
    # A tool-call grammar's allowed names: then the answer is only calls, at least one.
    grammar_tools: tuple[str, ...] | None = None
    # The content itself (a scripted answer), instead of content_tokens of random words.
    content_text: str | None = None


def words(vocab: tuple[str, ...], tokens: int, bytes_per_token: int, rng: random.Random) -> str:
    """About `tokens` tokens of words; a sentence ends every ~12 words."""
    if tokens <= 0:
        return ""
    budget = tokens * bytes_per_token
    out: list[str] = []
    size = 0
    while size < budget:
        word = rng.choice(vocab)
        if out and len(out) % 12 == 0:
            out[-1] += "."
        out.append(word)
        size += len(word) + 1
    text = " ".join(out)
    return text[:budget].rstrip() or text[:budget]


def _plan_calls(
    tools: list[Tool], controls: OutputControls, rng: random.Random
) -> list[tuple[str, dict[str, Any]]]:
    # An explicit call list is a test steering the exact output (even one a grammar forbids).
    if controls.tool_call_list is not None:
        return list(controls.tool_call_list)
    if controls.grammar_tools is not None:
        tools = [tool for tool in tools if tool.name in controls.grammar_tools]
    if not tools:
        return []
    count = controls.tool_calls
    if count is None:
        count = rng.randint(0, controls.max_auto_tool_calls)
    if controls.grammar_tools is not None:
        count = max(count, 1)
    calls = []
    for _ in range(count):
        tool = rng.choice(tools)
        calls.append((tool.name, arguments_for(tool.parameters, rng)))
    return calls


def plan_output(
    prompt_text: str | None,
    controls: OutputControls,
    rng: random.Random,
    bytes_per_token: int,
) -> list[str]:
    """The whole answer, as the token pieces to stream (the end-of-sequence not included)."""
    if controls.verbatim is not None:
        return split_pieces(controls.verbatim, bytes_per_token)
    prompt = prompt_text or ""
    thinking = prompt.rstrip().endswith(THINK_OPEN)
    parts: list[str] = []
    if thinking:
        parts.append(words(REASONING_WORDS, controls.reasoning_tokens, bytes_per_token, rng))
        parts.append(THINK_CLOSE)
    if controls.content_text is not None:
        parts.append(controls.content_text)
    elif controls.grammar_tools is None:
        parts.append(words(CONTENT_WORDS, controls.content_tokens, bytes_per_token, rng))
    parts.extend(
        render_call(name, args) for name, args in _plan_calls(find_tools(prompt), controls, rng)
    )
    # One text cut into tokens as a prompt's text is: the next turn's prompt, which carries
    # this output, then counts the output in (nearly) as many tokens as were generated, as a
    # real tokenizer re-encodes its own output. Cutting each tag afresh made more tokens here
    # than the prompt later counts, so a gateway promising prompt + output tokens (the output
    # promise, gateway/routing/affinity.py) saw the simulator cache one interval short now and
    # then.
    return split_pieces("".join(parts), bytes_per_token)
