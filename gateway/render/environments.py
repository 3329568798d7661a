"""The two template engines, configured as transformers' `apply_chat_template` configures Jinja2.

transformers compiles chat templates in an `ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True)` with the `loopcontrols` extension and its own `{% generation %}` tag, a
`tojson` filter that is plain `json.dumps` (no HTML escaping, `ensure_ascii=False` by default),
and the globals `raise_exception` and `strftime_now`. The model was trained on that output, so
both engines here get the same configuration (MiniJinja: `pycompat`, chainable undefined).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import minijinja
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' `tojson`: `json.dumps` with its defaults except `ensure_ascii`."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _raise_jinja2(message: str) -> None:
    raise jinja2.TemplateError(message)


def _raise_minijinja(message: str) -> None:
    raise minijinja.TemplateError(message)


class GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: transformers' assistant-mask tag.

    transformers only records offsets inside it when asked for an assistant-token mask; for
    a plain render the body is emitted unchanged, which is all a prompt renderer needs.
    """

    tags = {"generation"}  # noqa: RUF012 - jinja2's Extension API declares it as a class set

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_emit_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _emit_body(self, caller: Callable[[], str]) -> str:
        return caller()


def jinja2_template(source: str, extra_globals: dict[str, Any] | None = None) -> jinja2.Template:
    """Compile `source` exactly as transformers does (compile once, reuse: it is thread-safe)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = _raise_jinja2
    env.globals["strftime_now"] = strftime_now
    if extra_globals:
        env.globals.update(extra_globals)
    return env.from_string(source)


def minijinja_environment(
    source: str, name: str, extra_globals: dict[str, Any] | None = None
) -> minijinja.Environment:
    """A MiniJinja environment holding `source` as template `name`, configured to match."""
    env = minijinja.Environment(
        trim_blocks=True,
        lstrip_blocks=True,
        pycompat=True,
        undefined_behavior="chainable",
        filters={"tojson": tojson},
        globals={
            "raise_exception": _raise_minijinja,
            "strftime_now": strftime_now,
            **(extra_globals or {}),
        },
    )
    env.add_template(name, source)
    return env
