"""The wire diff: the same requests to the simulator and to the real sglang-kt server, their
answers compared key by key.

    python -m scripts.engine_cpu.wire_diff --sim URL --real URL     # prints the markdown table

What is compared is the shape the gateway and the dashboards rely on: status codes, content
types, which keys each JSON body and each stream event carries and their JSON types, finish
reasons, error bodies, the /server_info and /model_info fields the gateway reads, and the
/metrics names the dashboards query. Values that are the model's own (text, token ids,
timings) are not compared. tests/e2e/test_wire_diff.py runs it under `make test-engine` and
fails on any difference that docs/simulator.md does not list.

Stdlib and httpx only (it runs in the test virtualenv).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from monitoring import sglang_metrics

# A prompt in the prompt format the gateway renders (the tiny models' tokenizer knows it).
PROMPT = "[gMASK]<sop><|system|>Reasoning Effort: Low<|user|>Say hello.<|assistant|><think>"
# Fields of /server_info the gateway reads (gateway/routing/health.py) or the docs name.
SERVER_INFO_FIELDS = (
    "context_length",
    "max_running_requests",
    "max_total_num_tokens",
    "max_req_input_len",
    "max_mamba_cache_size",
    "mamba_track_interval",
    "limit_mm_data_per_request",
    "mm_process_config",
    "chunked_prefill_size",
    "version",
)
MODEL_INFO_FIELDS = ("has_image_understanding", "is_generation", "model_path")
# The metric names the dashboards may query (monitoring/sglang_metrics.py), and the one the
# simulator exports beyond them.
METRIC_NAMES = (
    *(f"{name}_bucket" for name in sglang_metrics.HISTOGRAMS),
    *sglang_metrics.GAUGES,
    *sglang_metrics.COUNTERS,
    "sglang:num_aborted_requests_total",
)
# Keys whose values are compared too (they are protocol, not model output).
VALUE_KEYS = frozenset({"finish_reason.type", "finish_reason.length", "status", "content_type"})


@dataclass(frozen=True)
class Probe:
    name: str
    method: str
    path: str
    body: Any = None
    stream: bool = False


def _generate(max_new: int, stream: bool, **sampling: Any) -> dict[str, Any]:
    params = {"max_new_tokens": max_new, "temperature": 0, **sampling}
    # Refusals are checked before generation; nothing is left running on either engine.
    return {"text": PROMPT, "sampling_params": params, "stream": stream}


PROBES: tuple[Probe, ...] = (
    Probe("generate", "POST", "/generate", _generate(4, False)),
    Probe("generate stream", "POST", "/generate", _generate(4, True), stream=True),
    Probe("generate max_new_tokens 0", "POST", "/generate", _generate(0, False)),
    # Not at temperature 0: SGLang makes that top_k 1 before it checks top_k.
    Probe("refusal top_k 0", "POST", "/generate", _generate(4, False, top_k=0, temperature=1)),
    Probe(
        "refusal top_k 0 stream",
        "POST",
        "/generate",
        _generate(4, True, top_k=0, temperature=1),
        True,
    ),
    Probe("generate greedy top_k 0", "POST", "/generate", _generate(4, False, top_k=0)),
    Probe(
        "refusal context",
        "POST",
        "/generate",
        {**_generate(4, False), "text": "hello " * 20000},
    ),
    Probe(
        "refusal context stream",
        "POST",
        "/generate",
        {**_generate(4, True), "text": "hello " * 20000},
        True,
    ),
    Probe("malformed body", "POST", "/generate", {"text": 5, "sampling_params": []}),
    Probe("abort unknown rid", "POST", "/abort_request", {"rid": "no-such-request"}),
    Probe("tokenize", "POST", "/tokenize", {"prompt": PROMPT}),
    Probe("health", "GET", "/health"),
    Probe("health_generate", "GET", "/health_generate"),
    Probe("server_info", "GET", "/server_info"),
    Probe("model_info", "GET", "/model_info"),
    Probe("metrics", "GET", "/metrics"),
)


def shape(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(key path, JSON type) for every key in a JSON value; lists by their first item."""
    if isinstance(value, Mapping):
        for key in sorted(value):
            path = f"{prefix}.{key}" if prefix else str(key)
            item = value[key]
            yield path, _type(item)
            if isinstance(item, Mapping | list):
                yield from shape(item, path)
    elif isinstance(value, list) and value and isinstance(value[0], Mapping | list):
        yield from shape(value[0], prefix + "[]")


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def _events(text: str) -> list[Any]:
    events: list[Any] = []
    for block in text.split("\n\n"):
        line = block.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        events.append("[DONE]" if data == "[DONE]" else json.loads(data))
    return events


def observe(base: str, probe: Probe, client: httpx.Client) -> dict[str, str]:
    """What one probe showed, flattened to key path -> type (or value for VALUE_KEYS)."""
    response = client.request(probe.method, base + probe.path, json=probe.body)
    seen: dict[str, str] = {
        "status": str(response.status_code),
        "content_type": response.headers.get("content-type", "").split(";")[0],
    }
    if probe.path == "/metrics":
        names = {line.split("{")[0].split(" ")[0] for line in response.text.splitlines()}
        for name in METRIC_NAMES:
            seen[name] = "present" if name in names else "absent"
        return seen
    if probe.stream and seen["content_type"] == "text/event-stream":
        events = _events(response.text)
        seen["events.last"] = "[DONE]" if events and events[-1] == "[DONE]" else "missing"
        objects = [e for e in events if isinstance(e, dict)]
        if objects:
            _flatten(seen, "first_event.", objects[0])
            _flatten(seen, "last_event.", objects[-1])
        return seen
    try:
        body = response.json()
    except ValueError:
        seen["body"] = "not JSON"
        return seen
    if probe.path == "/server_info":
        body = {k: body.get(k, "<missing>") for k in SERVER_INFO_FIELDS}
    elif probe.path == "/model_info":
        body = {k: body.get(k, "<missing>") for k in MODEL_INFO_FIELDS}
    _flatten(seen, "", body)
    return seen


def _flatten(seen: dict[str, str], prefix: str, body: Any) -> None:
    if not isinstance(body, Mapping | list):
        seen[prefix + "body"] = _type(body)
        return
    for path, kind in shape(body):
        key = prefix + path
        value = _lookup(body, path)
        if path in VALUE_KEYS or path.removeprefix("meta_info.") in VALUE_KEYS:
            seen[key] = json.dumps(value)
        elif value == "<missing>":
            seen[key] = "missing"
        else:
            seen[key] = kind


def _lookup(body: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(body, list):
            body = body[0] if body else None
        part = part.removesuffix("[]")
        body = body.get(part) if isinstance(body, Mapping) else None
    return body


@dataclass(frozen=True)
class Difference:
    probe: str
    key: str
    sim: str
    real: str

    def row(self) -> str:
        return f"| {self.probe} | `{self.key}` | {self.sim} | {self.real} |"


def diff(sim: str, real: str, probes: tuple[Probe, ...] = PROBES) -> list[Difference]:
    out: list[Difference] = []
    with httpx.Client(timeout=120, headers={"content-type": "application/json"}) as client:
        for probe in probes:
            a, b = observe(sim, probe, client), observe(real, probe, client)
            for key in sorted(set(a) | set(b)):
                left, right = a.get(key, "missing"), b.get(key, "missing")
                if left != right:
                    out.append(Difference(probe.name, key, left, right))
    return out


def table(differences: list[Difference]) -> str:
    lines = ["| probe | key | simulator | sglang-kt 0.7.2 |", "|---|---|---|---|"]
    lines += [d.row() for d in differences]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, out: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.engine_cpu.wire_diff")
    parser.add_argument("--sim", required=True, help="simulator base URL")
    parser.add_argument("--real", required=True, help="sglang-kt base URL")
    args = parser.parse_args(argv)
    out(table(diff(args.sim, args.real)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
