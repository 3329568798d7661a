"""The calibration profile of the simulator: model identity, scheduler bounds, timing tables.

Loaded from config/sim/<calibration>.yaml; every figure the performance model uses lives there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEFAULT_PROFILE = Path(__file__).resolve().parents[2] / "config" / "sim" / "rtx-pro-6000-epyc.yaml"


class ProfileError(ValueError):
    """The calibration file is missing a field or has one of the wrong shape."""


@dataclass(frozen=True)
class Profile:
    served_model_name: str
    model_path: str
    model_type: str
    architectures: tuple[str, ...]
    context_length: int
    eos_token_ids: tuple[int, ...]
    max_running_requests: int
    max_queued_requests: int
    max_total_tokens: int
    prefill_batch_tokens: int
    schedule_policy: str  # SCHEDULE_POLICIES
    checkpoint_slots: int
    track_interval: int
    bytes_per_token: int
    prefill_cold_seconds: tuple[tuple[float, float], ...]
    prefill_floor_seconds: float
    checkpoint_restore_seconds: float
    decode_ms_by_context: tuple[tuple[float, float], ...]
    decode_tps_by_batch: tuple[tuple[float, float], ...]
    reasoning_tokens: int
    content_tokens: int
    tool_calls: int | None  # None = "auto"
    max_auto_tool_calls: int


# SGLang's --schedule-policy values the simulator models: first come first served, and
# longest prefix match (waiting prompts with the longest cached prefix go first).
SCHEDULE_POLICIES = ("fcfs", "lpm")


def _section(doc: dict[str, Any], name: str) -> dict[str, Any]:
    value = doc.get(name)
    if not isinstance(value, dict):
        raise ProfileError(f"profile needs a mapping {name!r}")
    return value


def _table(section: dict[str, Any], key: str) -> tuple[tuple[float, float], ...]:
    rows = section.get(key)
    if not isinstance(rows, list) or not rows:
        raise ProfileError(f"profile table {key!r} must be a non-empty list of [x, y] pairs")
    table: list[tuple[float, float]] = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 2):
            raise ProfileError(f"profile table {key!r}: row {row!r} is not [x, y]")
        table.append((float(row[0]), float(row[1])))
    xs = [x for x, _ in table]
    if xs != sorted(xs) or len(set(xs)) != len(xs):
        raise ProfileError(f"profile table {key!r}: x values must increase")
    return tuple(table)


def _positive_int(section: dict[str, Any], key: str) -> int:
    value = section.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ProfileError(f"profile field {key!r} must be a positive integer, got {value!r}")
    return value


def _non_negative_float(section: dict[str, Any], key: str) -> float:
    value = section.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise ProfileError(f"profile field {key!r} must be a number >= 0, got {value!r}")
    return float(value)


def _policy(section: dict[str, Any]) -> str:
    value = section.get("schedule_policy", "fcfs")
    if value not in SCHEDULE_POLICIES:
        raise ProfileError(f"scheduler.schedule_policy must be one of {SCHEDULE_POLICIES}")
    return str(value)


def parse_profile(doc: dict[str, Any]) -> Profile:
    model = _section(doc, "model")
    sched = _section(doc, "scheduler")
    ckpt = _section(doc, "checkpoints")
    tok = _section(doc, "tokenizer")
    prefill = _section(doc, "prefill")
    decode = _section(doc, "decode")
    output = _section(doc, "output")
    tool_calls = output.get("tool_calls", "auto")
    if tool_calls != "auto" and (not isinstance(tool_calls, int) or tool_calls < 0):
        raise ProfileError("output.tool_calls must be 'auto' or an integer >= 0")
    return Profile(
        served_model_name=str(model["served_model_name"]),
        model_path=str(model.get("model_path", model["served_model_name"])),
        model_type=str(model.get("model_type", "")),
        architectures=tuple(str(a) for a in model.get("architectures", [])),
        context_length=_positive_int(model, "context_length"),
        eos_token_ids=tuple(int(i) for i in model.get("eos_token_ids", [])),
        max_running_requests=_positive_int(sched, "max_running_requests"),
        max_queued_requests=_positive_int(sched, "max_queued_requests"),
        max_total_tokens=_positive_int(sched, "max_total_tokens"),
        prefill_batch_tokens=_positive_int(sched, "prefill_batch_tokens"),
        schedule_policy=_policy(sched),
        checkpoint_slots=_positive_int(ckpt, "slots"),
        track_interval=_positive_int(ckpt, "track_interval"),
        bytes_per_token=_positive_int(tok, "bytes_per_token"),
        prefill_cold_seconds=_table(prefill, "cold_seconds"),
        prefill_floor_seconds=_non_negative_float(prefill, "floor_seconds"),
        checkpoint_restore_seconds=_non_negative_float(prefill, "checkpoint_restore_seconds"),
        decode_ms_by_context=_table(decode, "ms_per_step_by_context"),
        decode_tps_by_batch=_table(decode, "aggregate_tokens_per_second_by_batch"),
        reasoning_tokens=int(output.get("reasoning_tokens", 24)),
        content_tokens=int(output.get("content_tokens", 48)),
        tool_calls=None if tool_calls == "auto" else int(tool_calls),
        max_auto_tool_calls=int(output.get("max_auto_tool_calls", 2)),
    )


def load_profile(path: Path | None = None) -> Profile:
    source = path or DEFAULT_PROFILE
    try:
        doc = yaml.safe_load(source.read_text())
    except OSError as exc:
        raise ProfileError(f"cannot read profile {source}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ProfileError(f"profile {source} is not a YAML mapping")
    try:
        return parse_profile(doc)
    except KeyError as exc:
        raise ProfileError(f"profile {source} lacks {exc}") from exc
