"""The `flashbox-session-shape/1` file format: its fields, and a checker.

    problems = check_shape(json.loads(path.read_text()))   # [] when the file is well formed

A file is `{"format", "client", "client_version", "api", "notes", "sessions"}`; a session is
`{"id", "requests"}`; a request has exactly the keys of REQUEST_TYPES (scripts/session_shape.py
says how each is derived). The checker also holds a file to what makes it safe to commit: no
key beyond these, header names from the routing list only, and header values that are
enumerations or id stand-ins, never text (a value is at most MAX_HEADER_CHARS long).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from scripts.session_shape import FORMAT, ROUTING_HEADERS

CLIENTS = ("claude-code", "codex", "opencode", "synthetic")
APIS = ("anthropic", "responses", "openai")
KINDS = ("main", "subagent", "side")
FILE_KEYS = {"format", "client", "client_version", "api", "notes", "sessions"}
SESSION_KEYS = {"id", "requests"}
REQUEST_TYPES: dict[str, tuple[type, ...]] = {
    "at_s": (float, int),
    "lineage": (str,),
    "kind": (str,),
    "agent_id": (str, type(None)),
    "head": (str,),
    "head_tokens": (int,),
    "prompt_tokens": (int,),
    "extends": (int, type(None)),
    "output_tokens": (int,),
    "tool_calls": (int,),
    "max_tokens": (int,),
    "stream": (bool,),
    "compacted": (bool,),
    "headers": (dict,),
}
LINEAGE = re.compile(r"^(main|agent:\d+|side:\d+)(#\d+)?$")
MAX_HEADER_CHARS = 80


def _check_request(where: str, request: Any, earlier: list[Mapping[str, Any]]) -> list[str]:
    if not isinstance(request, dict) or set(request) != set(REQUEST_TYPES):
        keys = sorted(request) if isinstance(request, dict) else request
        return [f"{where}: keys {keys} are not {sorted(REQUEST_TYPES)}"]
    problems = [
        f"{where}.{key}: {type(request[key]).__name__} is not {types}"
        for key, types in REQUEST_TYPES.items()
        if not isinstance(request[key], types)
        or (isinstance(request[key], bool) and bool not in types)
    ]
    if problems:
        return problems
    if request["kind"] not in KINDS:
        problems.append(f"{where}.kind: {request['kind']!r} is not one of {KINDS}")
    if not LINEAGE.match(request["lineage"]):
        problems.append(f"{where}.lineage: {request['lineage']!r} is not main/agent:N/side:N[#k]")
    parent = request["extends"]
    if parent is not None:
        if not 0 <= parent < len(earlier):
            problems.append(f"{where}.extends: {parent} is not an earlier request")
        elif earlier[parent]["lineage"] != request["lineage"]:
            problems.append(f"{where}.extends: {parent} is in another lineage")
    if earlier and request["at_s"] < earlier[-1]["at_s"]:
        problems.append(f"{where}.at_s: earlier than the request before it")
    if (request["agent_id"] is None) == (request["kind"] == "subagent"):
        problems.append(f"{where}.agent_id: set exactly when the kind is subagent")
    for name, value in request["headers"].items():
        if name not in ROUTING_HEADERS:
            problems.append(f"{where}.headers: {name!r} is not a routing header")
        elif not isinstance(value, str) or len(value) > MAX_HEADER_CHARS:
            problems.append(f"{where}.headers.{name}: not a short string")
    numbers = ("head_tokens", "prompt_tokens", "output_tokens", "tool_calls", "max_tokens")
    problems += [f"{where}.{key}: negative" for key in numbers if request[key] < 0]
    if request["head_tokens"] > request["prompt_tokens"]:
        problems.append(f"{where}.head_tokens: more than prompt_tokens")
    return problems


def check_shape(document: Any) -> list[str]:
    """Everything that keeps `document` from being a well-formed shape file; [] if nothing."""
    if not isinstance(document, dict) or set(document) != FILE_KEYS:
        keys = sorted(document) if isinstance(document, dict) else document
        return [f"file: keys {keys} are not {sorted(FILE_KEYS)}"]
    problems = []
    if document["format"] != FORMAT:
        problems.append(f"format: {document['format']!r} is not {FORMAT!r}")
    if document["client"] not in CLIENTS:
        problems.append(f"client: {document['client']!r} is not one of {CLIENTS}")
    if document["api"] not in APIS:
        problems.append(f"api: {document['api']!r} is not one of {APIS}")
    for key in ("client_version", "notes"):
        if not isinstance(document[key], str):
            problems.append(f"{key}: not a string")
    sessions = document["sessions"]
    if not isinstance(sessions, list) or not sessions:
        return [*problems, "sessions: not a non-empty list"]
    ids = [s.get("id") for s in sessions if isinstance(s, dict)]
    if len(set(ids)) != len(sessions):
        problems.append("sessions: ids missing or not unique")
    for number, session in enumerate(sessions):
        where = f"sessions[{number}]"
        if not isinstance(session, dict) or set(session) != SESSION_KEYS:
            problems.append(f"{where}: keys are not {sorted(SESSION_KEYS)}")
            continue
        earlier: list[Mapping[str, Any]] = []
        for index, request in enumerate(session["requests"]):
            problems += _check_request(f"{where}.requests[{index}]", request, earlier)
            if isinstance(request, dict):
                earlier.append(request)
    return problems
