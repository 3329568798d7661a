"""Fault injection: how a request (or every request) misbehaves, for the tests of its clients.

A fault is written KIND or KIND:N, N being the number of tokens streamed before it strikes
(default 2 for the mid-stream kinds). Per request: the `x-sim-fault` header or
custom_params {"sim": {"fault": "..."}}; per process: --fault (with --fault-rate).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FaultKind(StrEnum):
    UNAVAILABLE = "503"  # HTTP 503 before any token
    DIE = "die"  # connection closed abruptly mid-stream (no terminating chunk)
    CRASH = "crash"  # the whole process exits mid-stream
    STALL_FIRST = "stall_first"  # no token ever comes (until abort or disconnect)
    STALL = "stall"  # stops sending after N tokens (until abort or disconnect)
    ERROR = "error"  # an in-stream {"error": ...} event after N tokens, then [DONE]
    MALFORMED = "malformed"  # an event that is not JSON after N tokens, then [DONE]


MID_STREAM_DEFAULT_AFTER = 2


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    after_tokens: int

    @property
    def before_first_token(self) -> bool:
        return self.kind in (FaultKind.UNAVAILABLE, FaultKind.STALL_FIRST)


def parse_fault(spec: str) -> Fault:
    kind_text, _, after_text = spec.strip().partition(":")
    try:
        kind = FaultKind(kind_text.strip().lower())
    except ValueError:
        choices = ", ".join(k.value for k in FaultKind)
        raise FaultSpecError(f"unknown fault {kind_text!r}; choose from {choices}") from None
    after = MID_STREAM_DEFAULT_AFTER
    if after_text:
        try:
            after = int(after_text)
        except ValueError:
            raise FaultSpecError(
                f"fault {spec!r}: the count after ':' must be an integer"
            ) from None
        if after < 0:
            raise FaultSpecError(f"fault {spec!r}: the count must be >= 0")
    if kind in (FaultKind.UNAVAILABLE, FaultKind.STALL_FIRST):
        after = 0
    return Fault(kind, after)
