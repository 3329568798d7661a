"""Long sessions of the real agent CLIs through the gateway, over the scripted simulator.

The clients, their tools, prompts and session plans are the ones scripts/record_session_shape.py
records with (CLIENTS): the same scripted plan (scripts/script_answers.py) is handed to the
simulator as a `--script` file (engine/sim/script.py), so the CLI takes the same long paths
(tool rounds, two subagents at once, resume, compaction) but every request goes through the
gateway's face, renderer, router and parser to a simulated engine.

    with cli_stack(client, work) as stack:
        report = run_sessions(client, executable, stack, home, work)
    report.refused      # the face's request counters with a code other than 200
    report.affinity     # flashbox_affinity_total by (outcome, lineage)
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.faces.responses.convert import flat_name
from scripts.record_session_shape import (
    AGAIN,
    API_KEY,
    FILES,
    LIST,
    SURVEY,
    Client,
    Failed,
    Session,
    plans,
)
from scripts.script_answers import Call, Script
from tests.support.metrics import affinity_outcomes, metric_samples
from tests.support.procs import Proc, start_gateway, start_sim
from tests.support.recording_proxy import Exchange, RecordingProxy, recording_proxy

# The sessions each client runs in the scenario tests and the recorded fixtures: resumed turn
# after turn (`claude -p --resume`, `codex exec resume`, `opencode run --session`), the first turn
# starting two subagents at once, with a context small enough that the client compacts by
# itself once or twice. The limits were found by trying: lower ones make the client compact
# again right after compacting (Codex loops; Claude Code stops with "autocompact thrashing"),
# since the notes file alone is ~3,500 tokens.
SCENARIOS: dict[str, tuple[Session, ...]] = {
    "codex": (
        Session((SURVEY, LIST, AGAIN, AGAIN, LIST), {"model_auto_compact_token_limit": 17000}),
    ),
    "claude-code": (
        Session(
            (SURVEY, LIST, AGAIN, AGAIN, AGAIN, AGAIN),
            {"CLAUDE_CODE_MAX_CONTEXT_TOKENS": 60000, "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": 60},
        ),
    ),
    "opencode": (Session((SURVEY, LIST, AGAIN, AGAIN), {"context_tokens": 30000}),),
}
# Claude Code's compaction prompt offers the same tools as its turns; this is how it starts.
CLAUDE_CODE_COMPACTION = "Your task is to create a detailed summary of the conversation so far"


def _call(call: Call) -> dict[str, Any]:
    name = flat_name(call.namespace, call.name) if call.namespace else call.name
    arguments = dict(call.input) if not isinstance(call.input, str) else {"input": call.input}
    return {"name": name, "arguments": arguments}


def sim_script(script: Script) -> dict[str, Any]:
    """The simulator's script document for the recorder's plan."""

    def steps(plan: Sequence[Sequence[Call]]) -> list[list[dict[str, Any]]]:
        return [[_call(call) for call in step] for step in plan]

    summary = {"final": script.summary_text}
    rules: list[dict[str, Any]] = [
        {"when": CLAUDE_CODE_COMPACTION, **summary},
        {"when_no_tools": True, **summary},
    ]
    rules += [
        {"when": key, "steps": steps(plan), "final": script.final_text}
        for key, plan in script.by_prompt.items()
    ]
    rules.append({"steps": steps(script.steps), "final": script.final_text})
    return {"max_calls": script.max_calls * 4, "rules": rules}


@dataclass
class Stack:
    gateway: Proc
    sim: Proc
    proxy: RecordingProxy  # in front of the gateway: what the CLI sent and got

    @property
    def url(self) -> str:
        return self.proxy.url

    def samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        return metric_samples(self.gateway.url, name)


@contextlib.contextmanager
def cli_stack(client: Client, work: Path, sim_flags: Sequence[str] = ()) -> Iterator[Stack]:
    """A keyed gateway in front of one simulator scripted with the client's plan."""
    with scripted_stack(sim_script(plans(client.tools(work), client.compaction)), sim_flags) as s:
        yield s


@contextlib.contextmanager
def scripted_stack(script: Mapping[str, Any], sim_flags: Sequence[str] = ()) -> Iterator[Stack]:
    """A gateway (key API_KEY) in front of one simulator following `script`
    (engine/sim/script.py), behind a recording proxy."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="sim-script-") as file:
        json.dump(script, file)
        file.flush()
        sim = start_sim("--script", file.name, "--content-tokens", "24", *sim_flags)
        try:
            env = {"FLASHBOX_API_KEYS": API_KEY, "FLASHBOX_HEALTH__INTERVAL_S": "0.2"}
            gateway = start_gateway([sim.url], env=env)
            try:
                with recording_proxy(gateway.url) as proxy:
                    yield Stack(gateway, sim, proxy)
            finally:
                gateway.stop()
        finally:
            sim.stop()


@dataclass
class Report:
    turns: int = 0
    requests_sent: int = 0
    compactions: int = 0
    failed: list[str] = field(default_factory=list)  # "status path: error body" per failure
    log: list[str] = field(default_factory=list)  # the gateway's routing lines (misses, restarts)
    codes: dict[str, float] = field(default_factory=dict)  # face request counters by code
    affinity: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def refused(self) -> dict[str, float]:
        return {code: n for code, n in self.codes.items() if code != "200" and n}

    @property
    def requests(self) -> int:
        return int(sum(self.codes.values()))

    def outcome(self, outcome: str, lineage: str | None = None) -> int:
        return int(
            sum(
                n
                for (o, kind), n in self.affinity.items()
                if o == outcome and lineage in (None, kind)
            )
        )


def prepare(work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        (work / name).write_text(text)


def run_sessions(
    client: Client,
    executable: Path,
    stack: Stack,
    home: Path,
    work: Path,
    sessions: Sequence[Session] | None = None,
) -> Report:
    """Each session's prompts in order, continued by the client's resume flag; a turn the CLI
    fails raises (scripts.record_session_shape.Failed) with its output."""
    report = Report()
    for session in sessions if sessions is not None else client.sessions:
        env = client.env(home, stack.url, session)
        session_id = None
        for prompt in session.prompts:
            session_id = client.turn(executable, env, work, prompt, session_id)
            report.turns += 1
    with stack.proxy.lock:
        exchanges = list(stack.proxy.exchanges)
    report.requests_sent = len(exchanges)
    for exchange in exchanges:
        if not 200 <= exchange.status < 300:
            report.failed.append(f"{exchange.status} {exchange.path}: {exchange.error}")
        if isinstance(exchange.body, dict) and client.compaction(exchange.headers, exchange.body):
            report.compactions += 1
    for labels, value in stack.samples("flashbox_requests_total"):
        if labels.get("api") == client.api:
            code = labels.get("code", "?")
            report.codes[code] = report.codes.get(code, 0.0) + value
    report.log = [line for line in stack.gateway.log().splitlines() if "gateway.routing" in line]
    report.affinity = affinity_outcomes(stack.gateway.url)
    return report


def run_scenario(client: Client, executable: Path, root: Path) -> tuple[Report, list[Exchange]]:
    """The client's scenario sessions in a fresh stack, HOME and work folder under `root`."""
    work, home = root / "work", root / "home"
    prepare(work)
    with cli_stack(client, work) as stack:
        try:
            report = run_sessions(client, executable, stack, home, work, SCENARIOS[client.name])
        except Failed as exc:
            failed = "\n".join(f"{e.status} {e.path}: {e.error}" for e in stack.proxy.failed())
            raise Failed(
                f"{exc}\nrequests that failed:\n{failed}\ngateway log:\n"
                f"{stack.gateway.log()[-4000:]}"
            ) from None
        with stack.proxy.lock:
            return report, list(stack.proxy.exchanges)
