"""One client's three cases through a fresh stack, and what the matrix asks of them.

    report = run_matrix(client, installed, root)   # a scripted simulator, the gateway, a proxy
    report.problems()                               # [] when every check holds

The stack is tests/support/cli_sessions.py's: a keyed gateway in front of a simulator that
follows the client's script (base.script_for), behind a recording proxy that keeps every request
the client sent and the error body of any that was not answered 2xx.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.record_session_shape import API_KEY
from tests.support.cli_sessions import scripted_stack
from tests.support.client_matrix.base import (
    MARKER,
    PLAIN_ANSWER,
    SECOND_ANSWER,
    SECOND_PROMPT,
    TOOL_ANSWER,
    TOOL_PROMPT,
    CaseFailed,
    Face,
    MatrixClient,
    Run,
    prepare_work,
    script_for,
)
from tests.support.metrics import affinity_outcomes
from tests.support.recording_proxy import Exchange

EXPECTED = {"plain": PLAIN_ANSWER, "tool": TOOL_ANSWER, "second": SECOND_ANSWER}
_FACES: dict[str, Face] = {
    "/v1/chat/completions": "chat",
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "messages",
    "/v1/responses": "responses",
}


def face_of(path: str) -> Face | None:
    path = path.split("?")[0].rstrip("/")
    if path.startswith("/v1/responses/"):
        return "responses"
    return _FACES.get(path)


@dataclass
class MatrixReport:
    client: MatrixClient
    answers: dict[str, str] = field(default_factory=dict)
    exchanges: list[Exchange] = field(default_factory=list)
    affinity: dict[tuple[str, str], float] = field(default_factory=dict)

    def bodies(self) -> list[str]:
        """Each generation request's body as JSON text."""
        return [
            json.dumps(e.body, ensure_ascii=False)
            for e in self.exchanges
            if e.method == "POST" and face_of(e.path) is not None
        ]

    def problems(self) -> list[str]:
        found = [
            f"{e.method} {e.path}: {e.status} {(e.error or '')[:600]}"
            for e in self.exchanges
            if not 200 <= e.status < 300
        ]
        cases = self.client.cases
        for case, expected in EXPECTED.items():
            if case not in cases:
                continue
            answer = self.answers.get(case)
            if answer is None or expected not in answer:
                found.append(f"{case}: answer {answer!r}, expected it to hold {expected!r}")
        bodies = self.bodies()
        if not any(MARKER in body for body in bodies):
            found.append(f"tool: no request carried the tool's result ({MARKER!r})")
        if "second" in cases and not any(
            SECOND_PROMPT in body and TOOL_PROMPT in body and MARKER in body for body in bodies
        ):
            found.append("second: no request continued the tool conversation with its history")
        used = {face_of(e.path) for e in self.exchanges} - {None}
        if used != set(self.client.faces):
            found.append(f"faces used {sorted(f for f in used if f)}, declared {self.client.faces}")
        misses = {k: v for k, v in self.affinity.items() if k[0] in ("verified_miss", "head_miss")}
        if any(misses.values()):
            found.append(f"affinity misses {misses}")
        return found


def run_matrix(client: MatrixClient, installed: Path, root: Path) -> MatrixReport:
    """The client's cases in order against a fresh stack; a case that fails raises CaseFailed
    with the requests that were refused and the gateway's log."""
    work, home = root / "work", root / "home"
    prepare_work(work)
    report = MatrixReport(client)
    with scripted_stack(script_for(client, work)) as stack:
        run = Run(stack.url, API_KEY, home, work)
        for case in client.cases:
            try:
                report.answers[case] = client.run(installed, case, run)
            except CaseFailed as exc:
                refused = "\n".join(
                    f"{e.status} {e.method} {e.path}: {(e.error or '')[:600]}"
                    for e in stack.proxy.failed()
                )
                raise CaseFailed(
                    f"{client.name} {case}: {exc}\nrequests refused:\n{refused}\n"
                    f"gateway log:\n{stack.gateway.log()[-3000:]}"
                ) from None
        with stack.proxy.lock:
            report.exchanges = list(stack.proxy.exchanges)
        report.affinity = affinity_outcomes(stack.gateway.url)
    return report


def recorded(report: MatrixReport) -> list[dict[str, Any]]:
    """What the client sent, in arrival order, as fixture records (before sanitizing)."""
    return [e.record() for e in report.exchanges if face_of(e.path) is not None]
