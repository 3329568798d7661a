"""Reasoning effort: the value any face accepts -> one template effort, or reasoning off.

The sets each API publishes today:
- OpenAI, chat `reasoning_effort` and Responses `reasoning.effort`: the openai package's
  `ReasoningEffort` (openai-python 3.51: none, minimal, low, medium, high, xhigh, max; its
  chat `completion_create_params` says "Currently supported values are `none`, `minimal`,
  `low`, `medium`, `high`, `xhigh`, and `max`").
- Anthropic, `output_config.effort`: the anthropic package's `OutputConfig` (low, medium,
  high, xhigh, max).

The chat template knows three levels (its `Reasoning Effort:` line: low, high, max; any other
value renders as max), so the seven values fold onto them the same way on every face. "none"
is not a level: the model does not reason at all (CoreRequest.thinking False closes the
reasoning block in the prompt).
"""

from __future__ import annotations

from typing import Any, Literal

OpenAIEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]

_OFF = "none"
_TEMPLATE_LEVEL = {
    "minimal": "low",
    "low": "low",
    "medium": "high",
    "high": "high",
    "xhigh": "max",
    "max": "max",
}


def reasoning_mode(effort: str | None) -> tuple[dict[str, Any], bool]:
    """(template kwargs, whether the model reasons) for an effort a face accepted; None
    leaves the template's default."""
    if effort == _OFF:
        return {}, False
    level = _TEMPLATE_LEVEL.get(effort or "")
    return ({"reasoning_effort": level} if level else {}), True
