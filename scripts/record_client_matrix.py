"""Record what the client matrix's clients send through the gateway, as fixtures.

    python -m scripts.record_client_matrix [--client NAME ...] [--out DIR]
    python -m scripts.record_client_matrix --table     # the README's table, to paste

Runs each client's three cases (tests/support/client_matrix) against the gateway over the
scripted simulator and writes every request it sent to a face, in arrival order, to
`DIR/<client>/NNN-<method>-<path>.json` (default DIR: tests/fixtures/clients). Text is rewritten
by face as the other fixtures' is (scripts/record_cli_sessions.py: same lengths and shapes, same
words mapped alike, so shared prefixes stay shared); structure, tools and headers are as sent.
The fast suite replays them (tests/e2e/test_client_replay.py). Needs npm, PyPI and their
registries the first time (the clients install under .cache/clients).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from scripts.fixture_synth import Record, write_fixtures
from scripts.record_cli_sessions import SANITIZE
from scripts.record_session_shape import API_KEY
from tests.support.client_matrix import matrix_clients, readme_table
from tests.support.client_matrix.runner import face_of, recorded, run_matrix
from tests.support.procs import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "clients"
_BY_FACE = {"chat": "opencode", "messages": "claude-code", "responses": "codex"}


def sanitize(record: Record) -> Record:
    face = face_of(str(record["path"]))
    sanitized = SANITIZE[_BY_FACE[face]](record) if face is not None else record
    if "response_id" in record:
        # The gateway's own random id, kept as the item_reference ids that name it are: the
        # replay maps it to the id its own answer makes (tests/support/replay.py).
        sanitized = {**sanitized, "response_id": record["response_id"]}
    return sanitized


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    names = [c.name for c in matrix_clients()]
    parser.add_argument("--client", action="append", choices=names)
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument("--table", action="store_true", help="print the README's table and exit")
    args = parser.parse_args()
    if args.table:
        print(readme_table())
        return 0
    for client in matrix_clients():
        if args.client and client.name not in args.client:
            continue
        installed = client.install()
        if isinstance(installed, str):
            raise SystemExit(installed)
        with tempfile.TemporaryDirectory(prefix=f"matrix-{client.name}-") as tmp:
            scratch = Path(tmp)
            report = run_matrix(client, installed, scratch)
            problems = report.problems()
            if problems:
                raise SystemExit(f"{client.name}: " + "\n".join(problems))
            raw = scratch / "raw"
            raw.mkdir()
            for n, record in enumerate(recorded(report), 1):
                path = str(record["path"]).split("?")[0].strip("/").replace("/", "_")
                (raw / f"{n:03d}-{str(record['method']).lower()}-{path}.json").write_text(
                    json.dumps(record)
                )
            write_fixtures(raw, args.out / client.name, sanitize, (str(scratch), API_KEY))
        print(f"{client.name}: {len(report.exchanges)} requests, answers {report.answers}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
