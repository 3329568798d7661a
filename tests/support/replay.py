"""Replay recorded client requests through a gateway, in the order they came.

    failures, outcomes = replay(gateway.url, records, KEY)

Each record is a fixture (`method`, `path`, `headers`, `body`); its credentials are replaced by
`key` (Bearer and x-api-key both) and its connection headers dropped. A record that made a
stored response carries its id (`response_id`, tests/support/recording_proxy.py): the replay
maps it to the id its own answer made, so later `item_reference`s resolve here. `failures`
lists every request not answered 2xx, `outcomes` what routing counted meanwhile
(flashbox_affinity_total deltas by (outcome, lineage)).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from tests.support.metrics import affinity_outcomes

CREDENTIALS = ("authorization", "x-api-key")
# Headers that describe the recorded connection, not the request.
_CONNECTION = ("host", "content-length", "accept-encoding", "connection")
# The id of the response an answer made: the JSON's first `id`, or `response.created`'s.
RESPONSE_ID = re.compile(r'"id"\s*:\s*"(resp_[A-Za-z0-9]+)"')


def _rid(response_id: str) -> str:
    return response_id.removeprefix("resp_")


def _renamed(record: dict[str, Any], made: dict[str, str]) -> Any:
    """The record's body with each recorded response's rid replaced by its replay's: the
    gateway names a response `resp_{rid}` and its output items `{prefix}_{rid}_{index}`, so
    this renames `previous_response_id` and every `item_reference` to what this gateway stored."""
    if not made:
        return record["body"]
    text = json.dumps(record["body"])
    for recorded, replayed in made.items():
        text = text.replace(recorded, replayed)
    return json.loads(text)


def load_records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def replay(
    url: str, records: Sequence[dict[str, Any]], key: str
) -> tuple[list[str], dict[tuple[str, str], float]]:
    before = affinity_outcomes(url)
    failures = []
    made: dict[str, str] = {}  # a recorded response's rid -> the one its replay made
    with httpx.Client(base_url=url, timeout=60) as http:
        for n, record in enumerate(records, 1):
            headers = {
                k: v
                for k, v in record["headers"].items()
                if k not in CREDENTIALS and k not in _CONNECTION
            }
            headers["authorization"] = f"Bearer {key}"
            headers["x-api-key"] = key
            response = http.request(
                record["method"], record["path"], headers=headers, json=_renamed(record, made)
            )
            if not 200 <= response.status_code < 300:
                failures.append(f"{n:03d} {record['path']}: {response.status_code} {response.text}")
            elif isinstance(record.get("response_id"), str):
                found = RESPONSE_ID.search(response.text)
                if found is not None:
                    made[_rid(record["response_id"])] = _rid(found.group(1))
    after = affinity_outcomes(url)
    return failures, {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k)}
