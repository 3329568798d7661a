"""A hostile corpus for all three faces: hand-written bad requests plus seeded mutations of the
real requests Claude Code, Codex and opencode sent (tests/fixtures/sessions), against a real
gateway over the simulator.

Every answer must be quick (no hang, streamed or not), never a 5xx, and either a success or a
4xx in the face's own error envelope (Anthropic's `{"type": "error", "error": {...}}` under
/v1/messages, OpenAI's `{"error": {"message", "type", "param", "code"}}` elsewhere) that says
what is wrong. A mutation changes one place of a valid request: a value of another type, an
unknown enum-like string, a missing key, an empty or huge value.
"""

from __future__ import annotations

import copy
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability.conftest import assert_healthy, gateway_env
from tests.support.procs import Proc, start_gateway, start_sim

SESSIONS = Path(__file__).resolve().parents[1] / "fixtures" / "sessions"
FACES = {
    "anthropic": ("claude-code", "/v1/messages"),
    "responses": ("codex", "/v1/responses"),
    "chat": ("opencode", "/v1/chat/completions"),
}
# More, or other, mutations for a longer hunt: FLASHBOX_HOSTILE_MUTATIONS, FLASHBOX_HOSTILE_SEED
# (6 x 800 per face found the three defects fixed with this file; 120 keeps it a few seconds).
MUTATIONS_PER_FACE = int(os.environ.get("FLASHBOX_HOSTILE_MUTATIONS", "120"))
SEED = int(os.environ.get("FLASHBOX_HOSTILE_SEED", "20261205"))
TIMEOUT_S = 30.0
ODD_VALUES: tuple[Any, ...] = (
    None, 0, -1, 10**12, 1.5, True, "", "zzz-not-a-value", [], {}, ["x"], {"x": 1}, "\udcff"[:0],
)  # fmt: skip


@pytest.fixture(scope="module")
def gateway() -> Iterator[Proc]:
    sim = start_sim("--content-tokens", "8", "--reasoning-tokens", "4", name="hostile")
    env = gateway_env(FLASHBOX_LIMITS__MAX_TOKENS="64", FLASHBOX_LIMITS__DEFAULT_MAX_TOKENS="8")
    proc = start_gateway([sim.url], env=env)
    try:
        yield proc
    finally:
        proc.stop()
        sim.stop()


def _seeds(client: str) -> list[dict[str, Any]]:
    """The client's model requests (not count_tokens), smallest first, a few of them."""
    bodies = []
    for path in sorted((SESSIONS / client).glob("*.json")):
        record = json.loads(path.read_text())
        if "count_tokens" not in record["path"] and isinstance(record["body"], dict):
            bodies.append(record["body"])
    bodies.sort(key=lambda body: len(json.dumps(body)))
    return bodies[:4]


def _paths(node: Any, here: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield here
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*here, key))
    elif isinstance(node, list):
        for i, value in enumerate(node[:8]):
            yield from _paths(value, (*here, i))


def mutate(body: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], str]:
    """One change at one place of a copy of `body`, and what it was."""
    out = copy.deepcopy(body)
    path = rng.choice([p for p in _paths(out) if p])
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    what = rng.choice(("value", "value", "delete", "huge", "enum"))
    if what == "delete" and isinstance(parent, dict):
        del parent[last]
    elif what == "huge":
        parent[last] = "x" * 200_000 if rng.random() < 0.5 else list(range(5000))
    elif what == "enum":
        parent[last] = "not-" + str(parent[last])[:20]
    else:
        parent[last] = rng.choice(ODD_VALUES)
    return out, f"{what} at {'.'.join(map(str, path))}"


def _check(response: httpx.Response, route: str, what: str) -> None:
    assert response.status_code < 500, f"{what}: {response.status_code} {response.text[:500]}"
    if response.status_code < 300:
        return
    body = response.json()
    if route == "/v1/messages":
        assert body["type"] == "error", what
        assert body["error"]["type"], what
        assert body["error"]["message"], what
    else:
        error = body["error"]
        assert error["message"], what
        assert error["type"], what
        assert set(error) >= {"message", "type", "param", "code"}, what


def _send(http: httpx.Client, route: str, body: Any, what: str) -> None:
    stream = isinstance(body, dict) and body.get("stream") is True
    with http.stream("POST", route, json=body, timeout=TIMEOUT_S) as response:
        if response.status_code < 300 and stream:
            for _ in response.iter_bytes():  # the stream must end, not hang
                pass
            return
        response.read()
        _check(response, route, what)


@pytest.mark.parametrize("face", sorted(FACES))
def test_mutated_client_requests_get_an_answer_or_the_faces_own_4xx(
    gateway: Proc, face: str
) -> None:
    client, route = FACES[face]
    seeds = _seeds(client)
    assert seeds, f"no recorded {client} requests under {SESSIONS}"
    rng = random.Random(f"{SEED}-{face}")
    with httpx.Client(base_url=gateway.url) as http:
        for seed in seeds:  # the originals are served
            _send(http, route, {**seed, "stream": False}, "the original")
        for n in range(MUTATIONS_PER_FACE):
            body, what = mutate(rng.choice(seeds), rng)
            _send(http, route, body, f"mutation {n}: {what}")
    assert_healthy(gateway)


HAND_CASES: list[tuple[str, Any]] = [
    ("not json", b"{not json"),
    ("a list", b"[1, 2]"),
    ("empty", b""),
    ("a string", b'"hello"'),
    ("deep", ("[" * 5000 + "]" * 5000).encode()),
    ("nul bytes", b'{"model": "glm-5.3-flash\\u0000", "messages": []}'),
]


@pytest.mark.parametrize("face", sorted(FACES))
@pytest.mark.parametrize(("name", "raw"), HAND_CASES, ids=[n for n, _ in HAND_CASES])
def test_malformed_bodies_get_the_faces_own_400(
    gateway: Proc, face: str, name: str, raw: bytes
) -> None:
    route = FACES[face][1]
    response = httpx.post(
        gateway.url + route,
        content=raw,
        headers={"content-type": "application/json"},
        timeout=TIMEOUT_S,
    )
    assert 400 <= response.status_code < 500, (name, response.status_code, response.text)
    _check(response, route, name)
