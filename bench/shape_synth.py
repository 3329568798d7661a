"""Synthetic Claude-Code-shaped sessions: a stand-in for recorded shapes, seeded.

What one session sends, as Claude Code does under one `x-claude-code-session-id`:
- the main conversation: a root (the project's head, ~30k tokens of system prompt + tools,
  shared by every session of the project, then the user's first message) and turns that
  extend it, separated by tool runs (seconds) or a person reading and typing (minutes);
- subagents (`x-claude-code-agent-id`), launched in groups that run at the same time from a
  main turn's answer, each on its own head (one per subagent type, shared across sessions),
  a few turns each;
- side requests (a title with the first message, summaries later) on small heads without
  tools, each a new root, sent between two main turns;
- compaction after every N main turns: a main turn asking for a summary, then the main
  conversation starts over ("main#2") from the project's head and that summary, with the
  `x-claude-code-context-compacted` hint header.
`at_s` places each request after its parent's estimated service time and a pause; the replay
never sends a request before its parent's answer, whatever the estimate.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.shapes import FORMAT, Kind, Shape, ShapeRequest, ShapeSession, dump_shape

SIDE_KINDS = ("title", "summary")
# Claude Code's routing headers with its gateway hint headers on, as recorded from 2.1.x
# (bench/shapes/claude-code.json); values are stand-ins.
COMPACTED_HEADER = "x-claude-code-context-compacted"
SESSION_HEADER = "x-claude-code-session-id"
AGENT_HEADER = "x-claude-code-agent-id"
CLASS_HEADER = "x-claude-code-request-class"
CLASS_1P_HEADER = "x-claude-1p-request-class"
PROMPT_HEADER = "x-claude-code-prompt-id"
AGENT_TYPE_HEADER = "x-claude-code-agent-type"
COMPACTION_HEADER = "x-claude-code-compaction"
AGENT_TYPES = ("Explore", "general-purpose", "Plan")
# Claude Code's max_tokens for conversations and for its small side queries.
MAIN_MAX_TOKENS = 32_000
SIDE_MAX_TOKENS = 512


@dataclass(frozen=True)
class SyntheticParams:
    sessions: int = 4
    turns: int = 8  # main-conversation turns per session, compaction requests not counted
    subagents: int = 2  # per session
    subagents_at_once: int = 2  # a group this large is launched from one main turn
    subagent_turns: int = 3
    side_requests: int = 2  # per session; the first is the title, sent with the first turn
    compact_after: int = 0  # main turns between compactions (0: none)
    projects: int = 1  # session i works in project i % projects (one head per project)
    head_tokens: int = 30_000
    subagent_types: int = 2
    subagent_head_tokens: int = 12_000
    side_head_tokens: int = 600
    first_message_tokens: int = 1_500
    growth_tokens: int = 1_500  # mean new text a turn: tool results, the user's next message
    output_tokens: int = 400  # mean answer size
    think_s: float = 120.0  # mean pause before a turn the user starts (reading, typing)
    tool_s: float = 8.0  # mean pause while tools run before the next agentic turn
    user_share: float = 0.3  # share of main turns after the first that the user starts
    seed: int = 0


def _estimate_s(prompt_tokens: int, cached: bool, output_tokens: int) -> float:
    """Service time on the tuned engine (FACTS.md section 2), only to space at_s: a hit is
    ~10 s, a cold prompt ~1,450 tokens/s over a 6.5 s floor, then 33.4 ms per output token."""
    prefill = 10.0 if cached else max(6.5, prompt_tokens / 1_450)
    return prefill + 0.0334 * output_tokens


@dataclass
class _Draft:
    """A request before its final index is known (requests are listed in send order)."""

    at_s: float
    fields: dict[str, Any]
    parent: _Draft | None = None
    order: int = 0
    done_s: float = field(default=0.0)


class _SessionBuilder:
    def __init__(self, p: SyntheticParams, index: int, rng: random.Random) -> None:
        self.p = p
        self.rng = rng
        self.sid = f"synthetic-{p.seed}-{index}"
        self.project_head = f"project:{index % p.projects}"
        self.drafts: list[_Draft] = []
        # Claude Code names each prompt the user types; the turns it causes carry its id.
        self.prompts = 0

    def _output(self, mean: int) -> int:
        return max(8, min(MAIN_MAX_TOKENS, int(self.rng.expovariate(1 / max(1, mean)))))

    def add(
        self,
        at_s: float,
        lineage: str,
        kind: Kind,
        head: str,
        head_tokens: int,
        prompt_tokens: int,
        *,
        parent: _Draft | None = None,
        agent_id: str | None = None,
        output_tokens: int | None = None,
        tool_calls: int = 0,
        compacted: bool = False,
        compaction: bool = False,
    ) -> _Draft:
        output = self._output(self.p.output_tokens) if output_tokens is None else output_tokens
        side = kind == "side"
        headers = self._headers(kind, head, agent_id, compacted=compacted, compaction=compaction)
        draft = _Draft(
            at_s=round(at_s, 3),
            fields={
                "lineage": lineage,
                "kind": kind,
                "agent_id": agent_id,
                "head": head,
                "head_tokens": head_tokens,
                "prompt_tokens": prompt_tokens,
                "output_tokens": output,
                "tool_calls": 0 if side else tool_calls,
                "max_tokens": SIDE_MAX_TOKENS if side else MAIN_MAX_TOKENS,
                "stream": True,
                "compacted": compacted,
                "headers": headers,
            },
            parent=parent,
            order=len(self.drafts),
        )
        draft.done_s = draft.at_s + _estimate_s(prompt_tokens, parent is not None, output)
        self.drafts.append(draft)
        return draft

    def _headers(
        self, kind: Kind, head: str, agent_id: str | None, *, compacted: bool, compaction: bool
    ) -> dict[str, str]:
        headers = {SESSION_HEADER: self.sid}
        prompt = f"{self.sid}-prompt-{self.prompts}"
        if kind == "side":
            headers[CLASS_HEADER] = "auxiliary"
        elif kind == "subagent" and agent_id is not None:
            headers[AGENT_HEADER] = agent_id
            headers[PROMPT_HEADER] = prompt
            headers[CLASS_HEADER] = "subagent"
            headers[CLASS_1P_HEADER] = "blocking-subagent"
            headers[AGENT_TYPE_HEADER] = AGENT_TYPES[int(head.rsplit(":", 1)[1]) % len(AGENT_TYPES)]
        elif compaction:
            headers[CLASS_HEADER] = "compaction"
            headers[CLASS_1P_HEADER] = "main"
            headers[COMPACTION_HEADER] = "auto"
        else:
            headers[PROMPT_HEADER] = prompt
            headers[CLASS_HEADER] = "main"
            headers[CLASS_1P_HEADER] = "main"
            if compacted:
                headers[COMPACTED_HEADER] = "auto"
        return headers

    def _growth(self) -> int:
        return max(100, int(self.rng.expovariate(1 / self.p.growth_tokens)))

    def extend(self, parent: _Draft, at_s: float, growth: int, **kw: Any) -> _Draft:
        f = parent.fields
        prompt = f["prompt_tokens"] + f["output_tokens"] + growth
        return self.add(
            at_s,
            f["lineage"],
            f["kind"],
            f["head"],
            f["head_tokens"],
            prompt,
            parent=parent,
            agent_id=f["agent_id"],
            **kw,
        )

    def side(self, at_s: float, number: int) -> None:
        kind = SIDE_KINDS[min(number - 1, len(SIDE_KINDS) - 1)]
        tokens = self.p.side_head_tokens
        prompt = tokens + self.rng.randint(200, 2_000)
        self.add(
            at_s,
            f"side:{number}",
            "side",
            f"side:{kind}",
            tokens,
            prompt,
            output_tokens=self.rng.randint(10, 60),
        )

    def subagent_group(self, at_s: float, first: int, count: int) -> float:
        """`count` subagents started at once; returns when the last one is estimated done."""
        p = self.p
        end = at_s
        for k in range(count):
            number = first + k
            kind = self.rng.randrange(p.subagent_types)
            head = f"{self.project_head}:agent:{kind}"
            agent_id = f"{self.sid}-agent-{number}"
            prompt = p.subagent_head_tokens + self.rng.randint(300, 2_000)
            turn = self.add(
                at_s + 0.05 * k,
                f"agent:{number}",
                "subagent",
                head,
                p.subagent_head_tokens,
                prompt,
                agent_id=agent_id,
                tool_calls=self.rng.randint(1, 3),
            )
            for t in range(2, p.subagent_turns + 1):
                last = t == p.subagent_turns
                turn = self.extend(
                    turn,
                    turn.done_s + self.rng.expovariate(1 / p.tool_s),
                    self._growth(),
                    tool_calls=0 if last else self.rng.randint(1, 3),
                )
            end = max(end, turn.done_s)
        return end

    def build(self) -> ShapeSession:
        p, rng = self.p, self.rng
        main_lineage, compactions = "main", 0
        prompt = p.head_tokens + p.first_message_tokens
        turn = self.add(
            0.0,
            main_lineage,
            "main",
            self.project_head,
            p.head_tokens,
            prompt,
            tool_calls=rng.randint(1, 2),
        )
        if p.side_requests:
            self.side(0.2, 1)  # the title, from the first message, while the turn runs
        # The main turns after which something runs before the next one (1 .. turns - 1).
        between = range(1, p.turns)
        side_after = set(rng.sample(between, p.side_requests - 1 if p.side_requests else 0))
        agent_after = set(rng.sample(between, _groups(p)))
        started_agents, sides, since_compaction = 0, 1, 1
        for number in range(2, p.turns + 1):
            ready = turn.done_s
            if number - 1 in agent_after:
                count = min(p.subagents_at_once, p.subagents - started_agents)
                ready = self.subagent_group(ready + 0.1, started_agents + 1, count)
                started_agents += count
            if number - 1 in side_after:
                sides += 1
                self.side(ready + 0.3, sides)
            if p.compact_after and since_compaction >= p.compact_after:
                summary = self.extend(turn, ready + 1.0, 200, output_tokens=2_000, compaction=True)
                compactions += 1
                main_lineage = f"main#{compactions + 1}"
                prompt = p.head_tokens + 2_000 + rng.randint(200, 800)
                turn = self.add(
                    summary.done_s + 1.0,
                    main_lineage,
                    "main",
                    self.project_head,
                    p.head_tokens,
                    prompt,
                    tool_calls=rng.randint(1, 2),
                    compacted=True,
                )
                since_compaction = 1
                continue
            user = rng.random() < p.user_share
            self.prompts += user
            pause = rng.expovariate(1 / (p.think_s if user else p.tool_s))
            calls = 0 if number == p.turns else rng.randint(0 if user else 1, 2)
            turn = self.extend(turn, ready + pause, self._growth(), tool_calls=calls)
            since_compaction += 1
        return self._session()

    def _session(self) -> ShapeSession:
        ordered = sorted(self.drafts, key=lambda d: (d.at_s, d.order))
        index = {id(d): i for i, d in enumerate(ordered)}
        requests = [
            ShapeRequest(
                at_s=d.at_s,
                extends=None if d.parent is None else index[id(d.parent)],
                **d.fields,
            )
            for d in ordered
        ]
        return ShapeSession(id=self.sid, requests=requests)


def _groups(p: SyntheticParams) -> int:
    """Groups of subagents launched at once (each from its own main turn)."""
    return -(-p.subagents // p.subagents_at_once)


def generate(p: SyntheticParams) -> Shape:
    """A `client: synthetic` shape; the same params (seed included) give the same shape."""
    if min(p.sessions, p.turns, p.projects, p.subagent_types, p.subagents_at_once) < 1:
        raise ValueError(
            "sessions, turns, projects, subagent_types and subagents_at_once must be >= 1"
        )
    if min(p.subagents, p.side_requests, p.compact_after, p.subagent_turns - 1) < 0:
        raise ValueError(
            "subagents, side_requests, compact_after must be >= 0, subagent_turns >= 1"
        )
    # Each subagent group and each side request after the title sits between two main turns.
    if _groups(p) > p.turns - 1 or max(0, p.side_requests - 1) > p.turns - 1:
        raise ValueError(
            f"{p.turns} main turns leave {p.turns - 1} places between them: too few for "
            f"{_groups(p)} subagent groups or {max(0, p.side_requests - 1)} later side requests"
        )
    sessions = [
        _SessionBuilder(p, i, random.Random(p.seed * 1_000_003 + i)).build()
        for i in range(p.sessions)
    ]
    notes = ", ".join(f"{k}={v}" for k, v in vars(p).items())
    return Shape(
        format=FORMAT,
        client="synthetic",
        client_version="bench.shape_synth/1",
        api="anthropic",
        notes=f"Claude-Code-shaped synthetic sessions: {notes}",
        sessions=sessions,
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench synth-shape", description=__doc__)
    defaults = SyntheticParams()
    for name, value in vars(defaults).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    p.add_argument("--out", type=Path, required=True, help="where to write the shape (JSON)")
    return p


def main(argv: list[str]) -> int:
    args = vars(build_parser().parse_args(argv))
    out: Path = args.pop("out")
    out.write_text(dump_shape(generate(SyntheticParams(**args))))
    print(f"wrote {out}")
    return 0
