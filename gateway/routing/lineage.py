"""Lineages and prompt heads: what routing remembers about a session beyond its pins.

A session (one `x-claude-code-session-id`, one opencode `x-session-id`, one Codex conversation)
holds several conversations, each with its own prompt and so its own checkpoint: the main one,
subagents, side requests (titles, summaries, classifiers: another system prompt, usually no
tools) and, after compaction, the main conversation restarted from a summary. Each is a lineage,
pinned on its own (gateway.routing.pins) and verified against its own previous turn.

The session table remembers, per session, its live main lineage (so a new main lineage with the
same head, or the client's compaction header, retires the old one: its checkpoint will not be
asked for again and stops holding budget) and where the session last placed a lineage (new
subagents and side requests go there when it has room, keeping a session's traffic together).

The head table remembers which replicas hold a checkpoint at the end of a prompt head (system
prompt and tools, up to the first user turn): the engine saves one when the gateway sends the
head's length, and a new lineage with that head placed there prefills only what follows it.
Both tables are LRU-ordered OrderedDicts, bounded in size and idle time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

MAIN = "main"
SUBAGENT = "subagent"
SIDE = "side"
KINDS = (MAIN, SUBAGENT, SIDE)

# Claude Code's x-claude-code-request-class hint header (when its hint headers are on).
_CLASS_KINDS = {
    "main": MAIN,
    "workflow": MAIN,
    "compaction": MAIN,  # the summary request extends the main conversation's prompt
    "subagent": SUBAGENT,
    "auxiliary": SIDE,
}


def declared_kind(request_class: str | None, agent: str | None) -> str | None:
    """The kind the client says (Claude Code's request class hint, or a subagent's agent id);
    None: the picker decides from the session (AffinityPicker: a tool-less conversation in a
    session that has a main one is a side request)."""
    said = _CLASS_KINDS.get((request_class or "").strip().lower())
    if said is not None:
        return said
    return SUBAGENT if agent else None


@dataclass(slots=True)
class SessionInfo:
    last_used: float
    # The live main lineage's key, head digest and whether it has tools (None: none yet).
    main: str | None = None
    main_head: str | None = None
    main_tools: bool = False
    # Where the session's latest new lineage was placed.
    replica: str | None = None


class SessionTable:
    def __init__(self, max_size: int, idle_ttl_s: float) -> None:
        self.max_size = max_size
        self.idle_ttl_s = idle_ttl_s
        self._sessions: OrderedDict[str, SessionInfo] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def touch(self, key: str, now: float) -> SessionInfo:
        """The session's entry, created when new, moved to the young end."""
        self.sweep(now)
        info = self._sessions.get(key)
        if info is None:
            info = self._sessions[key] = SessionInfo(last_used=now)
            while len(self._sessions) > self.max_size:
                self._sessions.popitem(last=False)
        else:
            info.last_used = now
            self._sessions.move_to_end(key)
        return info

    def peek(self, key: str) -> SessionInfo | None:
        return self._sessions.get(key)

    def sweep(self, now: float) -> None:
        while self._sessions:
            key, info = next(iter(self._sessions.items()))
            if now - info.last_used < self.idle_ttl_s:
                return
            del self._sessions[key]


class HeadTable:
    """Head digest -> {replica: when a request last saved or restored it there}."""

    def __init__(self, max_size: int, idle_ttl_s: float) -> None:
        self.max_size = max_size
        self.idle_ttl_s = idle_ttl_s
        self._heads: OrderedDict[str, dict[str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._heads)

    def replicas(self, head: str, now: float) -> list[str]:
        """Replicas believed to hold `head`'s checkpoint (used within the idle time)."""
        where = self._heads.get(head)
        if where is None:
            return []
        live = [name for name, used in where.items() if now - used < self.idle_ttl_s]
        if not live:
            del self._heads[head]
        return live

    def put(self, head: str, replica: str, now: float) -> None:
        where = self._heads.get(head)
        if where is None:
            where = self._heads[head] = {}
            while len(self._heads) > self.max_size:
                self._heads.popitem(last=False)
        else:
            self._heads.move_to_end(head)
        where[replica] = now

    def merge(self, head: str, replica: str, used: float) -> None:
        """What the shared store says (gateway.routing.fleet): kept if newer than ours."""
        where = self._heads.get(head)
        if where is None or where.get(replica, used - 1) < used:
            self.put(head, replica, used)

    def drop(self, head: str, replica: str) -> None:
        """The engine did not have it after all (evicted): forget it there."""
        where = self._heads.get(head)
        if where is not None:
            where.pop(replica, None)
            if not where:
                del self._heads[head]
