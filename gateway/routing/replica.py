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
    # Engine seconds of prefill this gateway has sent here and not yet seen answered (no first
    # token yet), as estimated at the pick (capacity.prefill_s): the queue a new prompt waits
    # behind, since the engine prefills one batch at a time.
    prefill_s: float = 0.0
    # Set by POST /admin/replicas/{name}/drain: no new work; its sessions move on their next turn.
    draining: bool = False
    # Set by DNS discovery when the replica's address left the answer: not probed, so it stays
    # unhealthy and its sessions fail over; cleared if the address comes back.
    gone: bool = False
    # When discovery marked it gone (monotonic seconds): it is dropped after
    # discovery.forget_after_s.
    gone_since: float | None = field(default=None, repr=False)
    # What the engine's /server_info reported (None: not yet, or it reports nothing).
    checkpoint_slots: int | None = None
    track_interval: int | None = None
    max_running_requests: int | None = None
    # The engine's context length in tokens (prompt + output must stay below it).
    context_length: int | None = None
    # /server_info's max_req_input_len: the longest prompt the engine takes (sglang-kt derives
    # it from the context and its token pool, and reports it even when context_length is null).
    max_input_tokens: int | None = None
    # The engine's image bounds (its --mm-process-config and --limit-mm-data-per-request).
    image_max_pixels: int | None = None
    max_images: int | None = None
    # /model_info's has_image_understanding (None: not reported).
    accepts_images: bool | None = None
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
class TurnOutput:
    """What a turn generated, as the engine's text (reasoning, content and tool calls as the
    model wrote them) and its token count: the engine checkpoints the prompt and this output
    together, which the next turn restores when the client sends the output back verbatim and
    its text tokenizes back to the tokens the engine sampled."""

    text: str
    tokens: int


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What routing sees of a request: its id, its session key (already hashed: see
    gateway.routing.session_key) and the rendered prompt. Built after rendering, before routing."""

    request_id: str
    session_key: str | None
    prompt: str = field(repr=False)
    # The conversation within the session (gateway.routing.session_key.lineage_key); None:
    # the session is one conversation.
    lineage: str | None = None
    # main, subagent or side when the client says (gateway.routing.lineage.declared_kind);
    # None: the picker decides, from `tools` and the session's other lineages.
    kind: str | None = None
    tools: bool = True
    # Digest of the rendered prompt's head (system prompt and tools, up to the first user turn),
    # and its tokens when it is long enough to be worth a checkpoint (0: not).
    head: str | None = None
    head_tokens: int = 0
    # Whether /generate asks the engine to save the head's checkpoint: only once a second
    # session has shown the head (gateway.core.heads), else each session's unique head would
    # hold a pool slot of its own.
    save_head: bool = False
    # The client compacted the conversation: the session's previous main lineage is over.
    compacted: bool = False
    # Digests of the request's images in prompt order, and what they add to the text's tokens.
    images: tuple[str, ...] = ()
    image_tokens: int = 0

    @property
    def key(self) -> str | None:
        """What a pin is kept under: the lineage, else the session."""
        return self.lineage or self.session_key
