"""Gateway settings: config/gateway.yaml (or FLASHBOX_CONFIG), overridden by FLASHBOX_* variables.

Precedence, highest first: arguments to `load_settings`, environment (`FLASHBOX_ENGINES`,
`FLASHBOX_HOST`, `FLASHBOX_PORT`, `FLASHBOX_API_KEYS`, and any nested field as
`FLASHBOX_<SECTION>__<FIELD>`), the YAML file, the defaults below. Every bound the gateway
enforces lives here, so an operator can see and change all of them in one file.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

_T = TypeVar("_T")

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "config" / "gateway.yaml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSettings(_Section):
    """What the gateway serves: names clients may ask for and how the model's text looks."""

    served_names: list[str] = Field(default_factory=lambda: ["glm-5.3-flash"], min_length=1)
    family: str = "glm47"
    # Strings the engine must stop on (the next turn's role tokens); merged with the client's.
    stop: list[str] = Field(default_factory=lambda: ["<|user|>", "<|observation|>"])
    # A prompt ending in this tag means the model starts inside its reasoning block.
    reasoning_open_tag: str = "<think>"
    # Appended after the open tag when a client turns reasoning off: the block is closed empty,
    # as the template renders past turns without reasoning.
    reasoning_close_tag: str = "</think>"
    # What the template writes for one image, and its tokens, each once per image: client text
    # holding them is refused (the engine pairs images with markers in order).
    image_marker: str = "<|begin_of_image|><|image|><|end_of_image|>"
    image_marker_tokens: list[str] = Field(
        default_factory=lambda: ["<|begin_of_image|>", "<|image|>", "<|end_of_image|>"]
    )
    # Where the first user turn starts in a rendered prompt: what precedes it is the prompt's
    # head (system prompt and tools), shared by every session of one client and project.
    user_turn_marker: str = "<|user|>"
    owned_by: str = "flashbox"
    # The parsers need the reasoning and tool-call markup, which are special tokens.
    skip_special_tokens: bool = False


class LimitSettings(_Section):
    """Input bounds: exceeding one answers 413 (body) or 400 (the rest), never a crash."""

    max_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    max_messages: int = Field(default=4096, gt=0)
    max_tools: int = Field(default=512, gt=0)
    max_stop_sequences: int = Field(default=16, gt=0)
    # Containers nested deeper than this in the body (tool schemas, arguments) answer 400.
    max_json_depth: int = Field(default=64, gt=0)
    # Ceiling on max_tokens / max_completion_tokens, and the value used when the client sets none
    # (SGLang's own default is only 128 tokens).
    max_tokens: int = Field(default=131072, gt=0)
    default_max_tokens: int = Field(default=32768, gt=0)
    # Longest x-request-id honoured from a client; longer or odd ones are replaced.
    max_request_id_chars: int = Field(default=128, gt=0)
    # What a request may expand into, relative to the bytes it sent (its body, plus a stored
    # history it names): a reasoning token inflates ~1000:1 and a tool_reference block
    # repeats a whole tool definition, so a small body could otherwise ask for gigabytes.
    # Reasoning tokens restore at most max_expansion_ratio x sent + expansion_floor_bytes in
    # total (past it: the visible text), tool_reference blocks expand at most as much (past
    # it: 400). A client that shows its reasoning sends it in clear too (ratio < 1); one that
    # hides it sends it compressed (~3:1). The floor serves small requests with long reasoning.
    max_expansion_ratio: float = Field(default=8.0, gt=0)
    expansion_floor_bytes: int = Field(default=1024 * 1024, ge=0)
    # The rendered prompt of a counted request is at most max_prompt_ratio x sent +
    # expansion_floor_bytes (past it: 400): template markup around short messages and tool
    # arguments adds several bytes per byte sent, restored reasoning up to the ratio above.
    max_prompt_ratio: float = Field(default=16.0, gt=0)
    # Token counts (count_tokens, input_tokens) are cached by rendered prompt: an agent asks
    # again for the same prompt, and a repeated count costs the engine nothing.
    count_cache_entries: int = Field(default=4096, ge=0)
    # /tokenize calls for counts at once (per gateway); more wait up to count_wait_s, then
    # 429: a flood of counts must not take the engine's tokenizer from generation.
    max_concurrent_counts: int = Field(default=4, gt=0)
    count_wait_s: float = Field(default=10.0, gt=0)


class UpstreamSettings(_Section):
    """The one shared HTTP client to the engines; timeouts allow CPU prefills of many minutes."""

    connect_timeout_s: float = Field(default=5.0, gt=0)
    # Waiting for the next byte of a stream: the first token after a 60k-token CPU prefill can
    # take several minutes, so this is long on purpose.
    read_timeout_s: float = Field(default=1800.0, gt=0)
    write_timeout_s: float = Field(default=30.0, gt=0)
    pool_timeout_s: float = Field(default=30.0, gt=0)
    max_connections: int = Field(default=2048, gt=0)
    max_keepalive_connections: int = Field(default=512, ge=0)
    keepalive_expiry_s: float = Field(default=30.0, ge=0)
    # Bound on one stream event: SGLang repeats the whole output so far in every event.
    max_event_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # True when the engine runs with --incremental-streaming-output (events carry only new text).
    incremental_output: bool = False
    # HTTP client for /generate: "wire" (gateway/upstream/wire.py, lean, plain http://) or
    # "httpx" (httpx's transport; about twice the CPU per relayed token, see bench/overhead.py).
    client: Literal["wire", "httpx"] = "wire"
    # Pass a request's top-level `custom_params` on to /generate (the simulator reads its
    # output and fault controls there). Off in production: SGLang has no such field.
    forward_custom_params: bool = False
    # Bound on an error body read from the engine (it is quoted to the client).
    max_error_body_bytes: int = Field(default=16384, gt=0)
    # abort_request and health probes use their own small client so a full pool never delays them.
    control_max_connections: int = Field(default=32, gt=0)
    abort_timeout_s: float = Field(default=1.0, gt=0)
    # A failed abort is tried again (a dropped one leaves the engine generating for nobody
    # until its own deadline): this many tries in all, pausing abort_retry_s, then twice that.
    abort_attempts: int = Field(default=4, gt=0, le=16)
    abort_retry_s: float = Field(default=0.25, ge=0)
    # /tokenize calls (count_tokens, input_tokens, prompt heads, prompts near the context) have
    # their own pool: a flood of counts fills it, not the control pool probes and aborts use.
    count_max_connections: int = Field(default=8, gt=0)
    # How long a streamed request waits for the engine's first event before the client gets
    # its status (gateway.upstream.stream.check_refusal): sglang-kt refuses in-stream within
    # milliseconds, and a refusal seen in time is the face's 4xx. A prefill that runs longer
    # is not slowed down: its first token still goes out the moment it comes.
    refusal_wait_s: float = Field(default=0.25, ge=0, le=5)
    # POST /tokenize (count_tokens), on the count pool: the whole exchange. SGLang encodes
    # on its HTTP process's event loop, so a busy engine answers late; a long prompt's count
    # never needs minutes, unlike a prefill.
    tokenize_timeout_s: float = Field(default=30.0, gt=0)
    # Bound on a /tokenize answer: it lists every token id of the prompt (~7 bytes each).
    max_tokenize_body_bytes: int = Field(default=64 * 1024 * 1024, gt=0)


class HealthSettings(_Section):
    interval_s: float = Field(default=2.0, gt=0)
    timeout_s: float = Field(default=2.0, gt=0)
    path: str = "/health"
    # SGLang answers 503 on /health while its detokenizer is silent for 20 s, which a long CPU
    # prefill can cause: only this many failed probes in a row mark a replica down. A refused
    # connection marks it down at once.
    unhealthy_after: int = Field(default=3, gt=0)
    healthy_after: int = Field(default=1, gt=0)


class DiscoverySettings(_Section):
    """Engines found by DNS (a Kubernetes headless Service): each address the name resolves to
    is a replica, and the name is looked up again every interval_s (docs/affinity.md,
    "Replicas"). Unset, the replicas are the static `engines`; set, `engines` is not used."""

    dns_name: str | None = None
    # The engines' port and scheme: an A/AAAA record carries only the address.
    port: int = Field(default=30000, gt=0, lt=65536)
    scheme: Literal["http", "https"] = "http"
    interval_s: float = Field(default=10.0, gt=0)
    # One lookup's deadline; a lookup that misses it keeps the replicas as they were.
    timeout_s: float = Field(default=5.0, gt=0)
    # Addresses taken from one answer; beyond it the replicas already in use are kept first.
    max_replicas: int = Field(default=64, gt=0)
    # A replica gone from the answer this long, with no request open there, is dropped from
    # the routing list (pods' addresses change with every restart: kept, the list would grow
    # by one for every address ever seen). Back after that, it is a new replica.
    forget_after_s: float = Field(default=3600.0, gt=0)
    # A dual-stack Service answers once per family for each pod: one engine would count twice.
    address_family: Literal["ipv4", "ipv6", "any"] = "ipv4"
    # "host:port" of a DNS server asked directly over UDP instead of the system resolver (tests,
    # or a server /etc/resolv.conf does not name). The name is asked as given: no search list.
    nameserver: str | None = None

    @field_validator("dns_name", "nameserver", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # A template that renders FLASHBOX_DISCOVERY__DNS_NAME="" means "no discovery".
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("nameserver")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is not None:
            host, _, port = value.rpartition(":")
            if not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"discovery.nameserver {value!r} must be host:port")
        return value

    def nameserver_address(self) -> tuple[str, int] | None:
        if self.nameserver is None:
            return None
        host, _, port = self.nameserver.rpartition(":")
        return host.strip("[]"), int(port)


class SharedStateSettings(_Section):
    """The shared state store (docs/fleet.md): a Redis-protocol server (Valkey or Redis) named
    by `state_url`, which every gateway of a fleet reads and writes. Its round trips are bounded
    by `timeout_s`; one that fails or times out is counted in flashbox_state_errors_total, the
    gateway goes on with its own local state, and asks the store again after `retry_s`.
    100 ms, though the store answers in a millisecond: the bound is wall time in the gateway's
    event loop, which on the appliance's host (every core busy with expert work) is late by
    milliseconds, and a round trip given up costs a split session or a checkpoint miss (~100 s)
    where waiting costs milliseconds (docs/fleet.md, "A host with no idle core")."""

    timeout_s: float = Field(default=0.1, gt=0)
    connect_timeout_s: float = Field(default=0.25, gt=0)
    retry_s: float = Field(default=1.0, gt=0)
    # Timeouts in a row before the store is skipped for retry_s (a refused connection or an
    # error answer skips it at once): a lone timeout is most often a late event loop.
    timeouts_before_skip: int = Field(default=2, gt=0)
    # Every key the gateways write starts with this (several fleets may share one server).
    key_prefix: str = "flashbox:"
    max_connections: int = Field(default=64, gt=0)
    # Turn reports (prompt tokens, prompt heads) written after the turn, in the background, many
    # per round trip: at most this many wait; past it one is skipped (the next turn's carries
    # the lineage's tokens again).
    max_pending_writes: int = Field(default=32, gt=0)
    # How long a turn's report waits for a fetch to carry it before it is sent on its own.
    report_delay_s: float = Field(default=0.01, ge=0)
    # A pinned turn is sent to its replica while its fetch runs (gateway.routing.fleet); true:
    # it waits for the fetch, one round trip more before its first token (for comparison).
    pinned_turns_wait: bool = False


class RoutingSettings(_Section):
    """Replica choice: session affinity that keeps each session on the replica holding its
    recurrent-state checkpoint (docs/affinity.md has the placement rules and the cost model)."""

    # flashbox: pins + rendezvous + checkpoint capacity + spill; the others are baselines.
    policy: Literal["flashbox", "consistent_hash", "round_robin"] = "flashbox"
    # Body fields that name a session when there is no x-session-id header, tried in order:
    # "user" or "metadata.<key>". Without one, the key is derived from the conversation's root.
    session_fields: list[str] = Field(default_factory=lambda: ["metadata.session_id"])
    pin_table_size: int = Field(default=100_000, gt=0)
    pin_idle_ttl_s: float = Field(default=3600.0, gt=0)
    # Used until (or unless) a replica's /server_info reports its own figures.
    checkpoint_slots: int = Field(default=192, gt=0)
    track_interval: int = Field(default=256, gt=0)
    max_running_requests: int = Field(default=16, gt=0)
    # Pool entries a session keeps between turns. SGLang's hybrid radix cache frees internal
    # nodes' states (the checkpoint a turn restored from) before leaves', so 1; raise it for an
    # engine that keeps superseded checkpoints as long as the latest ones.
    checkpoints_per_session: float = Field(default=1.0, ge=1.0)
    server_info_path: str = "/server_info"
    # Read with /server_info: `has_image_understanding` false (a text-only model) makes the
    # media stage refuse images with a 400, where the engine would drop them silently.
    model_info_path: str = "/model_info"
    # A failing /health from a replica with requests open here is a long prefill, not an
    # outage, for this long (SGLang's /health answers 503 during long CPU prefills).
    busy_probe_grace_s: float = Field(default=600.0, ge=0)
    # Spill cost model (FACTS.md section 2): a hit's TTFT, the cold prefill rate at 60k, and the
    # time one request holds a running slot (prefill + decode), all in engine seconds.
    spill: bool = True
    # New sessions: how far past its share of the pool's checkpoint budget a replica may fill
    # before the next rendezvous choice takes the session (bounded loads); 0 = strict balance.
    balance_slack: float = Field(default=0.1, ge=0)
    hit_ttft_s: float = Field(default=10.0, gt=0)
    prefill_tokens_per_s: float = Field(default=1273.0, gt=0)
    service_s: float = Field(default=20.0, gt=0)
    chars_per_token: float = Field(default=4.0, gt=0)
    # Circuit breaker: this many failed requests in a row open it for breaker_open_s.
    breaker_failures: int = Field(default=5, gt=0)
    breaker_open_s: float = Field(default=10.0, gt=0)
    # The half-open trial is a lease of this long (gateway/routing/breaker.py): a trial whose
    # request never reports (a bug, a task lost) shuts the replica out this long, not for
    # good. A trial still running past it lets one more request try, at most one per lease.
    breaker_trial_s: float = Field(default=60.0, gt=0)
    # Retries before the first byte reached the client: total attempts, exponential backoff
    # with full jitter between them.
    max_attempts: int = Field(default=3, gt=0)
    backoff_s: float = Field(default=0.05, ge=0)
    backoff_max_s: float = Field(default=1.0, ge=0)
    # Keys for /admin/*; empty disables the admin API.
    admin_api_keys: list[str] = Field(default_factory=list)
    # Prompt heads (docs/affinity.md): for a prompt whose head (system prompt and tools, up to
    # the first user turn) has at least min_head_tokens (counted by the engine's /tokenize once
    # per distinct head of at least that many characters), /generate asks the engine to
    # checkpoint the head's end, and a new lineage with that head goes where the checkpoint is.
    prompt_heads: bool = True
    min_head_tokens: int = Field(default=4096, gt=0)
    head_table_size: int = Field(default=4096, gt=0)
    head_idle_ttl_s: float = Field(default=3600.0, gt=0)
    # Head warming (gateway/routing/warm.py): a head that sessions restore is prefilled, with
    # no user waiting, on each replica that does not hold it yet while that replica has no
    # prefill queued, so a new session finds a holder that is idle. At most one warm per
    # replica at a time; the texts of head_warm_heads heads are kept; checked every
    # head_warm_check_s and whenever a head is offered.
    head_warm: bool = True
    head_warm_heads: int = Field(default=64, gt=0)
    head_warm_check_s: float = Field(default=1.0, gt=0)


class AuthSettings(_Section):
    # Whether /health, /ready and /metrics need a key too (Prometheus scrapes without one).
    protect_health: bool = False
    protect_metrics: bool = False


class RenderOffloadSettings(_Section):
    """Rendering is CPU work: large conversations render in a worker thread, off the loop."""

    min_messages: int = Field(default=32, ge=0)
    min_bytes: int = Field(default=64 * 1024, ge=0)


class ObservabilitySettings(_Section):
    log_level: str = "info"
    access_log: bool = False
    # OpenTelemetry traces over OTLP (gateway/observability/tracing.py, docs/monitoring.md
    # "Tracing"). Also on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
    # is set; where and how they go (endpoint, protocol, headers, sampler, service name) are
    # the standard OTEL_* variables.
    tracing: bool = False


class AdmissionSettings(_Section):
    """Chat requests served at once, and a bounded FIFO queue in front (gateway/admission.py)."""

    max_in_flight: int = Field(default=1024, gt=0)
    # Waiting requests beyond max_in_flight; one more is refused at once with 429.
    max_queue: int = Field(default=1024, ge=0)
    # A queued request still waiting after this long is refused with 503.
    queue_timeout_s: float = Field(default=30.0, gt=0)
    retry_after_s: int = Field(default=1, ge=0)
    # The counting endpoints (count_tokens, input_tokens) have a pool of their own, the same
    # way bounded: each renders a prompt and asks the engine's /tokenize, so a flood of them
    # must not take generation's slots, and a full generation pool must not hold a count up.
    count_max_in_flight: int = Field(default=32, gt=0)
    count_max_queue: int = Field(default=256, ge=0)
    count_queue_timeout_s: float = Field(default=15.0, gt=0)


class KeyRateLimits(_Section):
    """One key's own limits (rate_limits.keys); a field left unset takes the section's value."""

    requests_per_minute: int | None = Field(default=None, ge=0)
    tokens_per_minute: int | None = Field(default=None, ge=0)


class RateLimitSettings(_Section):
    """Per-API-key rate limits (gateway/ratelimit.py; docs/security.md, "Rate limits"): a
    request over one is refused with 429 and Retry-After before any engine work. 0 = unlimited.
    Without api_keys the limits apply per client address. With state_url they hold across the
    fleet (docs/fleet.md); when the store fails, each gateway counts only its own traffic."""

    requests_per_minute: int = Field(default=0, ge=0)
    # Prompt + completion tokens of finished requests: charged after the fact, so one request
    # can take a key past it; the key's next requests then wait until it has refilled.
    tokens_per_minute: int = Field(default=0, ge=0)
    # Overrides by key id: the first 12 hex digits of the key's sha256 (never the key itself;
    # `printf %s "$KEY" | sha256sum | cut -c1-12`), or "addr:<ip>" for a client address.
    keys: dict[str, KeyRateLimits] = Field(default_factory=dict)
    # Keys (or addresses) whose buckets this gateway keeps in process; beyond it the one seen
    # least recently is forgotten (its buckets start full again).
    max_tracked_keys: int = Field(default=10_000, gt=0)

    @field_validator("keys")
    @classmethod
    def _key_ids(cls, value: dict[str, KeyRateLimits]) -> dict[str, KeyRateLimits]:
        return _checked_key_ids(value, "rate_limits.keys")


def _checked_key_ids(value: dict[str, _T], where: str) -> dict[str, _T]:
    """Per-key settings are kept under key ids (or addr:<ip>), never under keys."""
    for key_id in value:
        if key_id.startswith("addr:"):
            try:
                ipaddress.ip_address(key_id.removeprefix("addr:"))
            except ValueError:
                raise ValueError(f"{where}: {key_id!r} is not addr:<ip>") from None
        elif not re.fullmatch(r"[0-9a-f]{12}", key_id):
            # Refused so that config never holds a key, only its id.
            raise ValueError(
                f"{where} are key ids: the first 12 hex digits of the key's sha256 "
                "(printf %s KEY | sha256sum | cut -c1-12), or addr:<ip>; got a "
                f"{len(key_id)}-character name"
            )
    return value


class KeyShare(_Section):
    """One key's share of the engine (fairness.keys)."""

    # Its share of a replica's slots against other flows of its priority band, when all want.
    weight: float = Field(default=1.0, gt=0, le=1000)
    # Higher bands are served first (a batch key below 0, an interactive one above).
    priority: int = Field(default=0, ge=-100, le=100)
    # Its own bound on requests waiting (None: fairness.max_queued_per_key); at least 1, since a
    # request routed to a full replica has nowhere else to go.
    max_queued: int | None = Field(default=None, ge=1)


class FairnessSettings(_Section):
    """Fair shares of each replica's running slots (gateway/fairness.py; docs/fairness.md):
    requests beyond a replica's running slots wait in the gateway, served by priority and
    then fairly across keys (client addresses without keys), not in the engine's FIFO."""

    enabled: bool = True
    # Requests waiting for a slot, over every replica and key; one more is refused with 429.
    max_queued: int = Field(default=1024, ge=1)
    # Requests one key (or address) may have waiting; one more is refused with 429.
    max_queued_per_key: int = Field(default=256, ge=1)
    # A request still waiting after this long is refused with 503 (timeouts.first_token_s
    # is the same bound on the engine's own queue).
    max_wait_s: float = Field(default=1800.0, gt=0)
    # Added to the priority of a session's pinned turn (its checkpoint waits at that replica):
    # with 1, interactive sessions' next turns go ahead of any key's new conversations.
    pinned_priority: int = Field(default=0, ge=0, le=100)
    # With state_url: how often each gateway trades its demand for the others' through the
    # store (gateway/fair_shares.py), and when a gateway that stopped writing is forgotten.
    fleet_refresh_s: float = Field(default=0.25, gt=0)
    fleet_stale_s: float = Field(default=2.0, gt=0)
    # Per-key weight, priority and queue bound, by key id (as rate_limits.keys).
    keys: dict[str, KeyShare] = Field(default_factory=dict)

    @field_validator("keys")
    @classmethod
    def _key_ids(cls, value: dict[str, KeyShare]) -> dict[str, KeyShare]:
        return _checked_key_ids(value, "fairness.keys")


class TimeoutSettings(_Section):
    """Deadlines on one engine request; a CPU prefill of a long prompt takes many minutes."""

    # From sending /generate to the first event carrying output (queue + prefill on the engine).
    first_token_s: float = Field(default=1800.0, gt=0)
    # Longest silence between two events once output flows (another request's long prefill
    # stalls every running decode, so this is long too).
    stream_idle_s: float = Field(default=1800.0, gt=0)


class SecuritySettings(_Section):
    # Origins allowed by CORS; empty: no CORS headers at all (browsers refuse cross-origin use).
    cors_allow_origins: list[str] = Field(default_factory=list)
    # One request's header block: an unfinished block past this many bytes is answered 431
    # while it arrives (gateway/connection.py); a finished one whose names and values sum
    # past it, or with more than max_headers, is answered 431 by the middleware.
    max_header_bytes: int = Field(default=64 * 1024, gt=0)
    max_headers: int = Field(default=100, gt=0)
    # A request's whole header block must arrive within this long of the connection opening
    # or of the request's first byte, else 408 and close: a byte every few seconds would
    # otherwise hold a connection forever (slow-header attacks). Clients send it at once.
    header_timeout_s: float = Field(default=10.0, gt=0)
    # A request body gets body_timeout_s plus one second per body_min_bytes_per_s it sent
    # (a 16 MB body on a 1 Mbit/s link keeps up); a body trickling slower is cut with 408.
    # Time the gateway itself stops reading (the app not yet reading the body) is not charged.
    body_timeout_s: float = Field(default=30.0, gt=0)
    body_min_bytes_per_s: int = Field(default=4096, gt=0)
    # Open client connections; past it a new one is answered 503 and closed at once (each
    # costs a file descriptor and buffers; uvicorn's limit_concurrency refuses requests, not
    # connections). Far above normal use: an agent CLI holds a handful.
    max_connections: int = Field(default=4096, gt=0)
    # An idle keep-alive connection is closed after this long (agents send requests in a row,
    # with pauses for tool runs and the user's reading).
    keep_alive_s: int = Field(default=75, gt=0)
    # Request and response bodies in logs (prompts!) only when true AND the level is debug.
    log_bodies: bool = False


class ReasoningSettings(_Section):
    """Reasoning tokens (Anthropic thinking signatures, Responses encrypted_content) carry the
    exact reasoning back, so the next turn's prompt extends this one
    (gateway/core/reasoning_codec.py)."""

    # HMAC key. Empty: a random key per process, so tokens stop verifying after a restart and
    # replayed turns fall back to the visible reasoning text. Set it
    # (FLASHBOX_REASONING__SIGNING_KEY) so sessions survive restarts and gateways share tokens.
    signing_key: str = ""
    # Older tokens are ignored (the visible text is used).
    max_age_s: float = Field(default=30 * 86400.0, gt=0)
    # Bound on the text one token may restore.
    max_text_bytes: int = Field(default=4 * 1024 * 1024, gt=0)


class AnthropicSettings(_Section):
    """The Anthropic Messages face (/v1/messages)."""

    # A ping frame after this many seconds without a byte: a cold prefill of a long session
    # takes minutes and Claude Code drops a stream after 300 s of silence.
    keepalive_s: float = Field(default=10.0, gt=0)
    # Leading system blocks starting with one of these are dropped before rendering: Claude
    # Code's attribution block differs per conversation and would break the shared prefix.
    drop_system_prefixes: list[str] = Field(default_factory=lambda: ["x-anthropic-billing-header:"])


class ResponsesSettings(_Section):
    """The OpenAI Responses face (/v1/responses): keep-alive and the bounded response store."""

    # A response.in_progress event after this many seconds without one (Codex's stream idle
    # timeout is 300 s; a cold prefill of a long session takes minutes).
    keepalive_s: float = Field(default=10.0, gt=0)
    # `store: true` responses kept for GET and previous_response_id; oldest evicted first.
    store_max_entries: int = Field(default=1024, ge=0)
    store_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    store_ttl_s: float = Field(default=3600.0, gt=0)
    # With state_url: a stored response bigger than this (response and conversation, as JSON)
    # is kept only in this gateway's store. It must cross the network within state.timeout_s.
    shared_max_entry_bytes: int = Field(default=1024 * 1024, ge=0)


class ShutdownSettings(_Section):
    # After SIGTERM: in-flight requests get this long to finish; the rest are aborted.
    grace_s: float = Field(default=30.0, ge=0)
    # Extra time for aborted streams to end before uvicorn cancels what is left.
    abort_grace_s: float = Field(default=5.0, gt=0)


# Pillow's names for the image containers the media stage reads.
ImageFormat = Literal["PNG", "JPEG", "WEBP", "GIF"]
IMAGE_FORMATS: tuple[ImageFormat, ...] = ("PNG", "JPEG", "WEBP", "GIF")


class MediaRemoteSettings(_Section):
    """Images given as http(s) URLs (gateway/media/fetch.py). Off by default: fetching a URL a
    client names is a server-side request forgery risk, so it is an operator's explicit choice
    and is bounded on every side."""

    enabled: bool = False
    # Exact host names (no wildcards, no suffix match) that images may be fetched from;
    # compared case-insensitively with the URL's host, and re-checked on every redirect hop.
    allowed_hosts: list[str] = Field(default_factory=list)
    # Plain http lets anyone on the path swap the image; only for hosts on a trusted network.
    allow_http: bool = False
    # A redirect can lead an allowed host's URL anywhere; when on, every hop is checked again
    # (scheme, host, resolved address) and at most max_redirects are followed.
    allow_redirects: bool = False
    max_redirects: int = Field(default=3, ge=0, le=10)
    connect_timeout_s: float = Field(default=3.0, gt=0)
    # One image's whole fetch: name resolution, every hop, and the body (a slow body is cut).
    total_timeout_s: float = Field(default=10.0, gt=0)
    # Fetches in flight at once across the gateway; more wait (inside their total timeout).
    max_concurrent_fetches: int = Field(default=16, gt=0)
    user_agent: str = "flashbox-gateway"


class MediaSettings(_Section):
    """Images in requests (gateway/media): what is accepted and every bound on its cost.

    The engine (sglang-kt) trusts any image_data string, so the gateway sends it only data URLs
    it built from bytes it has checked. docs: ../shared/docs/MEDIA.md sections 7.2 and 7.5."""

    # The engine refuses more than 8 images in one request (its --limit-mm-data-per-request).
    max_images: int = Field(default=8, ge=0, le=8)
    # Decoded bytes of one image, and of all images in one request. A data URL's base64 is
    # 4/3 of its bytes and also counts against limits.max_body_bytes, which is the first bound.
    max_image_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    max_request_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    # Width x height read from the header before any pixel is decoded (decompression bombs).
    # At most Pillow's own warning threshold, so Pillow's process-wide guard never decides.
    max_decoded_pixels: int = Field(default=40_000_000, gt=0, le=89_478_485)
    # Longer side / shorter side; the engine's smart_resize raises above 200.
    max_aspect_ratio: float = Field(default=200.0, ge=1.0, le=200.0)
    # The engine's --mm-process-config image.max_pixels (the launcher renders both from the
    # engine profile): the gateway's token estimate uses it. The engine accepts 12,544 to
    # 6,272,000 (its default); 1,254,400 caps an image at 800 tokens (MEDIA.md 2.3, 7.4).
    engine_max_pixels: int = Field(default=6_272_000, ge=12_544, le=6_272_000)
    # Estimated prompt tokens of all images in one request, markers included:
    # 8 images x (4,000 + 2) at the engine's default max_pixels (6,272,000); 8 x (800 + 2) =
    # 6,416 with KT's 1,254,400.
    max_request_image_tokens: int = Field(default=32_016, gt=0)
    # Container formats accepted (Pillow's names); GIF is sent as its first frame, as PNG.
    formats: list[ImageFormat] = Field(default_factory=lambda: list(IMAGE_FORMATS), min_length=1)
    # Check every pixel's data once (PNG: every compressed row inflated and its filter byte
    # read, gateway/media/png.py; JPEG: decoded at 1/8 scale; WebP: decoded): a truncated or
    # corrupt image is then a 400 here instead of a RuntimeError that breaks the engine's
    # stream. Costs CPU (bench: python -m bench media).
    full_decode: bool = True
    # Apply EXIF orientation (and send the result as PNG), as transformers' load_image does.
    # Off: SGLang itself ignores EXIF, and which convention the model was trained on is
    # unconfirmed; on, a rotated phone photo is re-encoded, losslessly, and grows.
    exif_transpose: bool = False
    # Images of at least this many bytes, or whose header declares at least this many pixels
    # (a few KB of PNG can hold tens of megapixels), are decoded and checked in a worker
    # thread; smaller ones cost less than the hand-off and are checked on the event loop.
    offload_min_bytes: int = Field(default=32 * 1024, ge=0)
    offload_min_pixels: int = Field(default=256 * 1024, ge=0)
    # Base64 strings (image data) of at least this many bytes are cut out of a request body
    # before orjson parses it, and put back after (gateway/faces/lifted_json.py): orjson
    # parses ~1 GB/s holding the GIL, so a worker thread would stall the loop as long.
    json_bypass_min_bytes: int = Field(default=64 * 1024, gt=0)
    # Images checked at once across the gateway, in worker threads; more wait their turn.
    # Each holds its pixels (up to 4 bytes x max_decoded_pixels), and each is a thread that
    # competes with the event loop for the GIL: with 8 large PNGs in flight the loop's longest
    # stall was ~6 ms at 1, ~10 ms at 2, 10-17 ms at 4 (bench: python -m bench media).
    max_concurrent_checks: int = Field(default=2, gt=0)
    remote: MediaRemoteSettings = Field(default_factory=MediaRemoteSettings)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLASHBOX_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    host: str = "0.0.0.0"
    port: int = Field(default=8080, gt=0, lt=65536)
    engines: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["http://127.0.0.1:30000"]
    )
    api_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # redis://host:6379/0 (or rediss://): the state every gateway of a fleet shares (pins,
    # budgets, prompt heads, the Responses store, rate limits). Unset: in-process state.
    state_url: str | None = None
    state: SharedStateSettings = Field(default_factory=SharedStateSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    discovery: DiscoverySettings = Field(default_factory=DiscoverySettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    render_offload: RenderOffloadSettings = Field(default_factory=RenderOffloadSettings)
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    rate_limits: RateLimitSettings = Field(default_factory=RateLimitSettings)
    fairness: FairnessSettings = Field(default_factory=FairnessSettings)
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    shutdown: ShutdownSettings = Field(default_factory=ShutdownSettings)
    reasoning: ReasoningSettings = Field(default_factory=ReasoningSettings)
    anthropic: AnthropicSettings = Field(default_factory=AnthropicSettings)
    responses: ResponsesSettings = Field(default_factory=ResponsesSettings)
    media: MediaSettings = Field(default_factory=MediaSettings)
    # Passed as-is to gateway.render's own settings model (RenderSettings), which validates it.
    render: dict[str, Any] = Field(default_factory=dict)

    @field_validator("state_url", mode="before")
    @classmethod
    def _state_url(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None  # FLASHBOX_STATE_URL="" in a template means "no shared store"
        if isinstance(value, str) and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                f"state_url {value!r} must be a redis://, rediss:// or unix:// URL "
                "(Valkey and Redis both speak it)"
            )
        return value

    @field_validator("engines", "api_keys", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("engines")
    @classmethod
    def _engine_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"engine URL {url!r} must start with http:// or https://")
        return [url.rstrip("/") for url in value]

    @model_validator(mode="after")
    def _an_engine_source(self) -> Settings:
        if not self.engines and self.discovery.dns_name is None:
            raise ValueError(
                "at least one engine base URL is needed (FLASHBOX_ENGINES), or a DNS name whose "
                "addresses are the engines (FLASHBOX_DISCOVERY__DNS_NAME)"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config_path = Path(os.environ.get("FLASHBOX_CONFIG", str(DEFAULT_CONFIG)))
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if config_path.is_file():
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_path))
        elif "FLASHBOX_CONFIG" in os.environ:
            raise FileNotFoundError(f"FLASHBOX_CONFIG points at {config_path}, which is not a file")
        return tuple(sources)


def load_settings(**overrides: Any) -> Settings:
    return Settings(**overrides)
