"""Replay a session shape (bench/shapes.py) against a server, and what came of each request.

Every session of the shape runs (`copies` times: each copy is a session of its own, with its
identity headers suffixed and its own text, on the same heads, as new sessions of one client in
one project are), starting spread over `ramp_s`. Within a session a request is sent at its
`at_s` (times the time scale), but never before the turn it extends has answered, so requests
whose times overlap run at once (subagents, side requests) and a turn follows its parent's real
answer. A session's main-kind requests are also sent one at a time, in order: a client's main
loop waits for each answer, and the root after a compaction is built from the summary the
compaction request returned (without this, on a server slower than the recording the new root
could overtake the summary request and the router would see the conversations swap). On a
server slower than the recording the pauses shrink; no request is sent early.

Per request: the server's prompt and cached tokens, whether the checkpoint held (a turn that
extends another: cached tokens cover the parent's prompt rounded down to the track interval; a
root whose head an earlier request had prefilled: cached tokens cover the head less one
interval), TTFT (wall / time scale until bench/timings.py puts the engine's share in hardware
seconds). All requests are streamed, also those recorded without streaming: the engine does
the same work, and TTFT stays measurable.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import httpx

from bench.client import StreamRecord
from bench.replay_text import Head, build_head, new_text
from bench.replay_wire import Body, Wire, wire_for
from bench.shapes import Shape, ShapeRequest, ShapeSession, heads_of
from bench.timings import EngineTiming, hardware_ttft

# Headers whose values are ids (the recorder's stand-ins): a copy of a session suffixes them,
# so that it is a session of its own. The others (request classes, agent types, compaction
# hints, Codex's turn metadata) are kinds, the same in every copy.
IDENTITY_HEADERS = frozenset(
    {
        "x-session-id",
        "x-session-affinity",
        "x-parent-session-id",
        "x-claude-code-session-id",
        "x-claude-code-agent-id",
        "x-claude-code-parent-agent-id",
        "x-claude-code-prompt-id",
        "session_id",
        "session-id",
        "thread-id",
        "x-codex-window-id",
        "x-codex-parent-thread-id",
    }
)
# Entries a recorder may keep with the headers that are body fields, not headers.
BODY_FIELDS = frozenset({"prompt_cache_key"})
# The least new text a turn adds, whatever the shape says (a turn always says something).
MIN_NEW_TOKENS = 16

# (conversation key) -> extra headers, e.g. smg's x-smg-routing-key.
ExtraHeaders = Callable[[str], Mapping[str, str]]


@dataclass(frozen=True)
class ReplayConfig:
    url: str  # OpenAI-style base URL, e.g. http://127.0.0.1:8080/v1
    model: str
    time_scale: float  # wall seconds per recorded second (the simulators' --time-scale)
    track_interval: int = 256
    copies: int = 1
    # Sessions (all copies) start at uniformly drawn offsets within this many recorded seconds.
    ramp_s: float = 0.0
    seed: int = 0
    # Replay every shape as chat completions, tools in the system text (smg's engines' route).
    chat_only: bool = False
    # Steer the simulator's answers to the recorded sizes (custom_params.sim).
    steer_output: bool = True
    chars_per_token: float = 4.0
    api_key: str | None = None
    timeout_s: float = 3600.0
    max_connections: int = 4096


@dataclass(frozen=True)
class PlannedSession:
    session: ShapeSession
    uid: str  # the session's id in this replay
    suffix: str  # appended to its identity headers ("" for the first copy)
    start_s: float  # recorded seconds after the replay's start


def plan(shape: Shape, copies: int, ramp_s: float, seed: int) -> list[PlannedSession]:
    rng = random.Random(seed)
    out = []
    for copy in range(copies):
        suffix = f"~{copy}" if copy else ""
        for session in shape.sessions:
            start = rng.uniform(0.0, ramp_s) if ramp_s > 0 else 0.0
            out.append(PlannedSession(session, session.id + suffix, suffix, start))
    return out


@dataclass
class RequestResult:
    session: str
    index: int
    lineage: str
    kind: str
    turn: int  # 1 for a root, its parent's + 1
    head: str
    head_tokens: int
    compacted: bool
    ok: bool
    error: str | None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    # A turn that extends an answered one: eligible for its checkpoint, and whether it hit.
    eligible: bool = False
    hit: bool = False
    # A main turn with a side request of its session sent since the turn it extends.
    after_side: bool = False
    # A root whose head another request had prefilled before it was sent; whether it hit.
    head_eligible: bool = False
    head_hit: bool = False
    # Its session's first request, with its head prefilled by another session before.
    head_reuse: bool = False
    sent_s: float = 0.0  # wall seconds since the replay started
    first_token_s: float | None = None  # the same clock
    ttft: float | None = None
    ttft_scaled: float | None = None
    rid: str = ""
    replica: str | None = None


@dataclass
class _Answered:
    body: Body
    record: StreamRecord


@dataclass(frozen=True)
class _Run:
    cfg: ReplayConfig
    wire: Wire
    client: httpx.AsyncClient
    heads: Mapping[str, Head]
    origin: float
    extra_headers: ExtraHeaders | None


# Where a conversation's session id is, in the order the gateway's faces read them.
SESSION_HEADERS = ("x-claude-code-session-id", "session_id", "session-id", "x-session-id")


def conversation_key(planned: PlannedSession, req: ShapeRequest) -> str:
    """The session, and the subagent within it: what a router should keep together (an
    opencode subagent is a session of its own, under its own x-session-id)."""
    found = next((req.headers[h] for h in SESSION_HEADERS if h in req.headers), None)
    session = planned.uid if found is None else found + planned.suffix
    return session if req.agent_id is None else f"{session}/{req.agent_id}"


def request_headers(
    planned: PlannedSession,
    req: ShapeRequest,
    *,
    chat_only: bool,
    extra: ExtraHeaders | None = None,
    api_key: str | None = None,
) -> dict[str, str]:
    """The shape's headers (identity values suffixed for copies); for chat-only routers, the
    conversation under x-session-id instead. `extra` adds headers by conversation key."""
    key = conversation_key(planned, req)
    headers: dict[str, str] = {}
    if chat_only:
        headers["x-session-id"] = key
    else:
        for name, value in req.headers.items():
            if name not in BODY_FIELDS:
                headers[name] = value + planned.suffix if name in IDENTITY_HEADERS else value
    if extra is not None:
        headers.update(extra(key))
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def cache_key(planned: PlannedSession, req: ShapeRequest) -> str:
    """Codex's prompt_cache_key: recorded with the headers, else its session id header (Codex
    sets the key to the session id)."""
    found = (
        req.headers.get("prompt_cache_key")
        or req.headers.get("session_id")
        or req.headers.get("session-id")
    )
    return found + planned.suffix if found else conversation_key(planned, req)


def _after_side(session: ShapeSession, index: int) -> bool:
    req = session.requests[index]
    if req.kind != "main" or req.extends is None:
        return False
    return any(r.kind == "side" for r in session.requests[req.extends + 1 : index])


def _previous_main(session: ShapeSession) -> list[int | None]:
    """Per request, the main-kind request before it that it waits for (main requests only)."""
    out: list[int | None] = []
    last: int | None = None
    for i, r in enumerate(session.requests):
        out.append(last if r.kind == "main" else None)
        if r.kind == "main":
            last = i
    return out


def _turns(session: ShapeSession) -> list[int]:
    turns: list[int] = []
    for r in session.requests:
        turns.append(1 if r.extends is None else turns[r.extends] + 1)
    return turns


async def _one(
    run: _Run,
    planned: PlannedSession,
    index: int,
    answers: list[asyncio.Future[_Answered | None]],
    turn: int,
    after: int | None,
) -> RequestResult:
    cfg, req = run.cfg, planned.session.requests[index]
    loop = asyncio.get_running_loop()
    result = RequestResult(
        session=planned.uid,
        index=index,
        lineage=req.lineage,
        kind=req.kind,
        turn=turn,
        head=req.head,
        head_tokens=req.head_tokens,
        compacted=req.compacted,
        ok=False,
        error=None,
        after_side=_after_side(planned.session, index),
    )
    delay = run.origin + (planned.start_s + req.at_s) * cfg.time_scale - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)
    if after is not None:
        await answers[after]  # answered or failed: the main loop goes on either way
    head = run.heads[req.head]
    if req.extends is None:
        tokens = req.prompt_tokens - req.head_tokens
        text = new_text(max(MIN_NEW_TOKENS, tokens), planned.uid, index, cfg.chars_per_token)
        body = run.wire.root(head, req, text, cache_key(planned, req))
        parent_prompt = 0
    else:
        parent = await answers[req.extends]
        if parent is None:
            result.error = f"the turn it extends (request {req.extends}) failed"
            return result
        done = parent.record
        if req.prompt_tokens == planned.session.requests[req.extends].prompt_tokens:
            body = parent.body  # the same prompt sent again
        else:
            tokens = req.prompt_tokens - done.prompt_tokens - done.completion_tokens
            text = new_text(max(MIN_NEW_TOKENS, tokens), planned.uid, index, cfg.chars_per_token)
            body = run.wire.extend(parent.body, done, head, req, text)
        parent_prompt = done.prompt_tokens
    result.rid = f"replay-{index}-{uuid.uuid4().hex}"
    headers = request_headers(
        planned, req, chat_only=cfg.chat_only, extra=run.extra_headers, api_key=cfg.api_key
    )
    headers["x-request-id"] = result.rid
    sent = loop.time()
    record = await run.wire.send(run.client, cfg.url.rstrip("/"), body, headers)
    if record.ok:
        answers[index].set_result(_Answered(body, record))
    floor = parent_prompt // cfg.track_interval * cfg.track_interval
    result.ok, result.error, result.replica = record.ok, record.error, record.replica
    result.prompt_tokens, result.cached_tokens = record.prompt_tokens, record.cached_tokens
    result.completion_tokens = record.completion_tokens
    result.eligible = record.ok and floor > 0
    result.hit = result.eligible and record.cached_tokens >= floor
    result.sent_s = sent - run.origin
    if record.ttft is not None:
        result.first_token_s = result.sent_s + record.ttft
        result.ttft = result.ttft_scaled = record.ttft / cfg.time_scale
    return result


async def _session(run: _Run, planned: PlannedSession) -> list[RequestResult]:
    loop = asyncio.get_running_loop()
    requests = planned.session.requests
    answers: list[asyncio.Future[_Answered | None]] = [loop.create_future() for _ in requests]
    turns = _turns(planned.session)
    previous = _previous_main(planned.session)

    async def one(i: int) -> RequestResult:
        try:
            return await _one(run, planned, i, answers, turns[i], previous[i])
        finally:
            if not answers[i].done():  # failed: its children give up instead of waiting
                answers[i].set_result(None)

    return list(await asyncio.gather(*(one(i) for i in range(len(requests)))))


def mark_heads(results: list[RequestResult], track_interval: int) -> list[RequestResult]:
    """Head eligibility and hits of roots, and head reuse of sessions' first requests: which
    heads another request had prefilled (its first token came) before a root was sent."""
    answered = sorted(
        (r.first_token_s, r.head, r.session)
        for r in results
        if r.ok and r.first_token_s is not None
    )
    out = []
    for r in results:
        if r.turn != 1 or r.head_tokens < track_interval:
            out.append(r)
            continue
        before = [s for t, head, s in answered if head == r.head and t <= r.sent_s]
        eligible = bool(before) and r.ok
        out.append(
            replace(
                r,
                head_eligible=eligible,
                head_hit=eligible and r.cached_tokens >= r.head_tokens - track_interval,
                head_reuse=r.ok and r.index == 0 and any(s != r.session for s in before),
            )
        )
    return out


async def replay(
    shape: Shape, cfg: ReplayConfig, extra_headers: ExtraHeaders | None = None
) -> list[RequestResult]:
    """Every planned session at once; results in plan order, then request order."""
    wire = wire_for(shape.api, cfg.model, steer=cfg.steer_output, chat_only=cfg.chat_only)
    heads = {
        head: build_head(head, info, cfg.chars_per_token) for head, info in heads_of(shape).items()
    }
    limits = httpx.Limits(max_connections=cfg.max_connections)
    timeout = httpx.Timeout(cfg.timeout_s, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        run = _Run(cfg, wire, client, heads, asyncio.get_running_loop().time(), extra_headers)
        planned = plan(shape, cfg.copies, cfg.ramp_s, cfg.seed)
        nested = await asyncio.gather(*(_session(run, p) for p in planned))
    return mark_heads([r for session in nested for r in session], cfg.track_interval)


def with_engine_timings(
    results: list[RequestResult], timings: Mapping[str, EngineTiming], time_scale: float
) -> list[RequestResult]:
    """Results whose TTFT is in hardware seconds (bench/timings.py); without a timing the
    scaled figure stays."""
    out = []
    for r in results:
        timing = timings.get(r.rid)
        if timing is None or r.ttft_scaled is None:
            out.append(r)
        else:
            out.append(replace(r, ttft=hardware_ttft(r.ttft_scaled, timing, time_scale)))
    return out
