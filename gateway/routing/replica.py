"""One engine replica as the gateway sees it: where it is, whether it is up, how busy it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gateway.routing.breaker import CircuitBreaker


@dataclass(slots=True)
class Replica:
    name: str
    base_url: str
    healthy: bool = False
    in_flight: int = 0
    # Set by POST /admin/replicas/{name}/drain: no new work; its sessions move on their next turn.
    draining: bool = False
    # What the engine's /server_info reported (None: not yet, or it reports nothing).
    checkpoint_slots: int | None = None
    track_interval: int | None = None
    max_running_requests: int | None = None
    # The engine's context length in tokens (prompt + output must stay below it).
    context_length: int | None = None
    # The engine's image bounds (its --mm-process-config and --limit-mm-data-per-request).
    image_max_pixels: int | None = None
    max_images: int | None = None
    info_loaded: bool = field(default=False, repr=False)
    # Since when /health has failed while requests were open here (a long prefill); None: not.
    busy_since: float | None = field(default=None, repr=False)
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker, repr=False)
    # Consecutive probe results, for the thresholds in HealthSettings.
    failures: int = field(default=0, repr=False)
    successes: int = field(default=0, repr=False)

    @classmethod
    def from_url(cls, base_url: str) -> Replica:
        parts = urlsplit(base_url)
        return cls(name=parts.netloc or base_url, base_url=base_url.rstrip("/"))


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What routing sees of a request: its id, its session key (already hashed: see
    gateway.routing.session_key) and the rendered prompt. Built after rendering, before routing."""

    request_id: str
    session_key: str | None
    prompt: str = field(repr=False)
