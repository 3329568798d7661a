"""Just enough PromQL reading to check dashboards and alerts: which series a query selects.

Not a parser: a scanner that knows where metric names can stand (not before `(`, not inside
`by (...)` lists, not in strings, ranges or label matchers), which is all the checks need.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<braces>\{(?:[^{}"']|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')*\})
    | (?P<range>\[[^\]]*\])
    | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?(?:ms|[smhdwy])?)
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<other>\S)
    """,
    re.VERBOSE,
)
# Keywords followed by a parenthesised label list, which holds label names, not metrics.
_LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_OPERATOR_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"})
_NAME_MATCHER = re.compile(r"""__name__\s*=\s*"((?:[^"\\]|\\.)*)\"""")
_GRAFANA_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


@dataclass(frozen=True)
class Selector:
    """A vector selector: metric name and its `{...}` matchers as written (may be empty)."""

    name: str
    matchers: str = ""

    def __str__(self) -> str:
        if not self.matchers:
            return self.name
        if self.matchers.startswith("{__name__"):
            return self.matchers
        return self.name + self.matchers


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str


def _tokens(expr: str) -> list[_Token]:
    out = []
    for match in _TOKEN.finditer(expr):
        kind = match.lastgroup
        if kind is None:  # pragma: no cover - every alternative is a named group
            continue
        out.append(_Token(kind, match.group(kind)))
    return out


def _skip_group(tokens: list[_Token], start: int) -> int:
    """Index just past the parenthesised group opening at `start` (or `start` if none)."""
    if start >= len(tokens) or tokens[start].text != "(":
        return start
    depth = 0
    for index in range(start, len(tokens)):
        if tokens[index].text == "(":
            depth += 1
        elif tokens[index].text == ")":
            depth -= 1
            if depth == 0:
                return index + 1
    return len(tokens)


def _walk(tokens: list[_Token]) -> Iterator[Selector]:
    index = 0
    while index < len(tokens):
        token = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if token.kind == "ident":
            lowered = token.text.lower()
            if lowered in _LABEL_LIST_KEYWORDS:
                index = _skip_group(tokens, index + 1)
                continue
            if lowered == "offset":
                index += 2
                continue
            is_call = following is not None and (
                following.text == "(" or following.text.lower() in ("by", "without")
            )
            if lowered in _OPERATOR_KEYWORDS or is_call:
                index += 1
                continue
            if following is not None and following.kind == "braces":
                yield Selector(token.text, following.text)
                index += 2
                continue
            yield Selector(token.text)
        elif token.kind == "braces":
            # A selector without a bare name: {__name__="sglang:num_running_reqs", ...}.
            name = _NAME_MATCHER.search(token.text)
            if name is not None:
                yield Selector(name.group(1), token.text)
        index += 1


def selectors(expr: str) -> list[Selector]:
    """The vector selectors in `expr`, in order of appearance, without repeats."""
    seen: dict[Selector, None] = {}
    for selector in _walk(_tokens(expr)):
        seen.setdefault(selector, None)
    return list(seen)


def metric_names(expr: str) -> set[str]:
    return {selector.name for selector in selectors(expr)}


def expand(expr: str, variables: Mapping[str, str]) -> str:
    """Replace Grafana variables ($name, ${name}, ${name:format}) so Prometheus can run `expr`.

    Raises KeyError for a variable not in `variables`, so no query runs half-expanded.
    """

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return variables[name]

    return _GRAFANA_VARIABLE.sub(replace, expr)
