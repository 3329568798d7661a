"""Doctor results and the plain-words table they print as."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class Status(Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    found: str
    fix: str = ""


def ok(name: str, found: str) -> Check:
    return Check(name, Status.OK, found)


def warn(name: str, found: str, fix: str) -> Check:
    return Check(name, Status.WARN, found, fix)


def fail(name: str, found: str, fix: str) -> Check:
    return Check(name, Status.FAIL, found, fix)


def skip(name: str, found: str, fix: str = "") -> Check:
    return Check(name, Status.SKIP, found, fix)


def failed(checks: Sequence[Check]) -> bool:
    return any(c.status is Status.FAIL for c in checks)


def render_table(checks: Sequence[Check]) -> str:
    """CHECK / RESULT / FOUND columns; a failure or warning is followed by what to do."""
    name_w = max([len("CHECK"), *(len(c.name) for c in checks)])
    status_w = max([len("RESULT"), *(len(s.value) for s in Status)])
    indent = " " * (name_w + status_w + 4)
    lines = [f"{'CHECK':<{name_w}}  {'RESULT':<{status_w}}  FOUND"]
    for c in checks:
        lines.append(f"{c.name:<{name_w}}  {c.status.value:<{status_w}}  {c.found}")
        if c.fix and c.status in (Status.FAIL, Status.WARN, Status.SKIP):
            lines.append(f"{indent}-> {c.fix}")
    return "\n".join(lines) + "\n"


def summary(checks: Sequence[Check]) -> str:
    fails = sum(c.status is Status.FAIL for c in checks)
    warns = sum(c.status is Status.WARN for c in checks)
    if fails:
        return f"{fails} check(s) failed, {warns} warning(s): fix the FAIL lines before `make up`."
    if warns:
        return f"No failures, {warns} warning(s): the engine can start; read the warnings."
    return "All checks passed: `make up` starts the engine."
