"""Enforcing tool_choice "required" and a named function with SGLang's constrained decoding.

What the pinned engine (sglang-kt 0.7.2) accepts, read from its wheel:
- `sampling_params` takes `json_schema`, `regex`, `ebnf` and `structural_tag` (strings);
  `SamplingParams.verify` rejects more than one of json_schema/regex/ebnf; the grammar manager
  uses the first set in the order json_schema, regex, ebnf, structural_tag.
- The default grammar backend is **llguidance** (`server_args._handle_grammar_backend`:
  xgrammar is not installed because it would clash with transformers-kt); it requires
  llguidance >=0.7.11,<0.8. Its `ebnf` goes through `llguidance.grammar_from("ebnf", text)`,
  which passes text with a `start:` rule through as llguidance's Lark dialect (GBNF otherwise):
  so an `ebnf` may use `%json{...}` for JSON values and lexeme intersection/negation.
- Its `structural_tag` handler accepts only the legacy form (`structures` + `triggers`) whose
  bodies are JSON-schema values: it cannot describe GLM's XML-like `<arg_key>` markup, and a
  triggered tag is optional, so it cannot force a call. Hence: `ebnf` (Lark) for both modes.
- With `--reasoning-parser` set, the grammar is wrapped so it applies only after the
  `</think>` token, when the request says `require_reasoning: true` (a top-level /generate
  field, default false: then the grammar applies from the first token). Our prompts end inside
  `<think>`, so a constrained request sets it when the output starts in reasoning; the engine
  must run with `--reasoning-parser glm45` (FACTS.md section 4) for the model to still reason.
  An engine without it applies the grammar at once: the output is then the calls alone,
  which the parser handles the same way.
- Tags are written as plain string literals, as sglang-kt's own GLM-4.7 forced-call grammar
  (`Glm47MoeDetector.get_forced_tool_call_ebnf`) writes them; we could not check here how the
  GLM tokenizer marks them, so that is the one assumption to verify on a real engine.

"auto" is not constrained (the model may answer in text); "none" is not constrained either:
the tools are not rendered and the parser reads markup as text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class DecodingConstraint:
    """Extra fields for the engine request: merged into `sampling_params` and the body."""

    sampling_params: Mapping[str, Any] = field(default_factory=dict)
    request_fields: Mapping[str, Any] = field(default_factory=dict)
    # A stop string that ends the answer but belongs to it (the end of the one tool call a
    # request without parallel calls may make): the engine trims its stop strings from the
    # text, so the relay puts this one back when the engine says it matched.
    kept_stop: str | None = None

    @property
    def is_empty(self) -> bool:
        return not self.sampling_params and not self.request_fields and self.kept_stop is None


class DecodingConstraintBuilder(Protocol):
    """Per family: what makes the engine honour tool_choice (empty when nothing is needed).

    Raises `gateway.errors.InvalidRequestError` for a tool_choice that cannot be honoured.
    """

    def __call__(
        self,
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: str | Mapping[str, Any] | None,
        starts_in_reasoning: bool,
        parallel_tool_calls: bool = True,
    ) -> DecodingConstraint: ...
