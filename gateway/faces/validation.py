"""The one way every face says what is wrong with a request pydantic refused.

A field that may be a string or a list (content, input, tool_choice) fails as both when the list
is wrong; the string branch's "should be a valid string" says nothing to fix, so the other
branch's problem is told. Among those, our own validators' messages (value errors: "content parts
of type 'x' are not supported") say most. Union members pydantic names in a location
("str", "list[...]", a model's class name) are left out of it: `messages.0.content.1`.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

_MEMBER = re.compile(r"^(str|int|float|bool|list\[.*|dict\[.*|[A-Z][A-Za-z0-9]*)$")


def _member(part: object) -> bool:
    return isinstance(part, str) and _MEMBER.match(part) is not None


def _string_branch(error: Any) -> bool:
    """The error of trying a non-string value as the string it could have been."""
    return error["loc"][-1:] == ("str",) and not isinstance(error.get("input"), str)


def validation_message(exc: ValidationError) -> tuple[str, str | None]:
    """The first useful problem, said so the client can fix it, and the field it is in."""
    errors = exc.errors(include_url=False)
    useful = [error for error in errors if not _string_branch(error)] or errors
    useful.sort(key=lambda error: error["type"] != "value_error")  # stable: ours first
    first = useful[0]
    where = ".".join(str(part) for part in first["loc"] if not _member(part))
    more = f" (and {len(useful) - 1} more problems)" if len(useful) > 1 else ""
    text = f"Invalid request: '{where}': {first['msg']}{more}." if where else first["msg"]
    return text, where or None
