"""One engine replica as the gateway sees it: where it is, whether it is up, how busy it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass(slots=True)
class Replica:
    name: str
    base_url: str
    healthy: bool = False
    in_flight: int = 0
    # Consecutive probe results, for the thresholds in HealthSettings.
    failures: int = field(default=0, repr=False)
    successes: int = field(default=0, repr=False)

    @classmethod
    def from_url(cls, base_url: str) -> Replica:
        parts = urlsplit(base_url)
        return cls(name=parts.netloc or base_url, base_url=base_url.rstrip("/"))


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What routing sees of a request: its id, the client's session key (x-session-id) and
    the rendered prompt (for prefix-aware placement). Built after rendering, before routing."""

    request_id: str
    session_key: str | None
    prompt: str = field(repr=False)
