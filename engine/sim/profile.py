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


# sglang-kt 0.7.2's GLM-5-Next adapter (multimodal/processors/glm5_next.py): image.max_pixels
# lies in [MIN_PIXELS, MAX_PIXELS]; the default is the maximum, 8000 * 14^2 * 2^2.
MIN_PIXELS = 12_544
MAX_PIXELS = 6_272_000
MM_MODALITIES = ("image", "video", "audio")


@dataclass(frozen=True)
class ImageProfile:
    """The model's image path as the engine serves it (docs/simulator.md, "Images").

    Figures marked uncalibrated in the YAML are estimates until a GPU host measures them.
    """

    image_token: str
    image_token_id: int
    video_token: str
    video_token_id: int
    max_images_per_request: int
    # --mm-process-config image.max_pixels; None: not set (the engine's default applies).
    max_pixels_flag: int | None
    # --limit-mm-data-per-request; None: not set.
    limit_mm_data_per_request: dict[str, int] | None
    # SGLANG_ENABLE_MM_SPLITTING: one pad hash per image instead of one per request.
    mm_splitting: bool
    hybrid_tokens_per_second: float
    hybrid_floor_seconds: float
    vision_seconds_per_patch: float
    vision_seconds_per_patch_squared: float
    preprocess_seconds_per_megapixel: float

    @property
    def max_pixels(self) -> int:
        return MAX_PIXELS if self.max_pixels_flag is None else self.max_pixels_flag


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
    # None: a text-only model (the engine ignores image_data, /model_info says so).
    images: ImageProfile | None = None


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


def _positive_float(section: dict[str, Any], key: str) -> float:
    value = _non_negative_float(section, key)
    if value <= 0:
        raise ProfileError(f"profile field {key!r} must be a number > 0, got {value!r}")
    return value


def parse_mm_process_config(config: Any) -> int | None:
    """image.max_pixels from the engine's --mm-process-config, checked as the adapter checks it
    (glm5_next.py _resolve_max_pixels): only {"image": {"max_pixels": int}} is accepted."""
    if config is None or config == {}:
        return None
    if not isinstance(config, dict):
        raise ProfileError("mm_process_config must be a JSON object")
    if set(config) - {"image"}:
        raise ProfileError(f"mm_process_config accepts only 'image'; got {sorted(config)}")
    image = config.get("image", {})
    if not isinstance(image, dict) or set(image) - {"max_pixels"}:
        raise ProfileError("mm_process_config.image accepts only 'max_pixels'")
    if "max_pixels" not in image:
        return None
    value = image["max_pixels"]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProfileError("mm_process_config image.max_pixels must be an integer")
    if not MIN_PIXELS <= value <= MAX_PIXELS:
        raise ProfileError(
            f"mm_process_config image.max_pixels must be within [{MIN_PIXELS}, {MAX_PIXELS}]; "
            f"got {value}"
        )
    return value


def parse_mm_limits(limits: Any) -> dict[str, int] | None:
    """The engine's --limit-mm-data-per-request: {modality: count} (server_args.py checks the
    modalities)."""
    if limits is None or limits == {}:
        return None
    if not isinstance(limits, dict):
        raise ProfileError("limit_mm_data_per_request must be a JSON object")
    checked: dict[str, int] = {}
    for modality, count in limits.items():
        if modality not in MM_MODALITIES:
            raise ProfileError(
                f"limit_mm_data_per_request: invalid modality {modality!r}; "
                f"allowed: {list(MM_MODALITIES)}"
            )
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ProfileError(f"limit_mm_data_per_request.{modality} must be an integer >= 0")
        checked[modality] = count
    return checked


def _flag(section: dict[str, Any], key: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise ProfileError(f"profile field {key!r} must be true or false, got {value!r}")
    return value


def _images(doc: dict[str, Any]) -> ImageProfile | None:
    if doc.get("images") is None:
        return None
    images = _section(doc, "images")
    hybrid = _section(images, "hybrid_prefill")
    vision = _section(images, "vision")
    for key in ("image_token", "video_token"):
        if not isinstance(images.get(key), str) or not images[key]:
            raise ProfileError(f"images.{key} must be a non-empty string")
    max_pixels = images.get("max_pixels")
    return ImageProfile(
        image_token=images["image_token"],
        image_token_id=_positive_int(images, "image_token_id"),
        video_token=images["video_token"],
        video_token_id=_positive_int(images, "video_token_id"),
        max_images_per_request=_positive_int(images, "max_images_per_request"),
        max_pixels_flag=None
        if max_pixels is None
        else parse_mm_process_config({"image": {"max_pixels": max_pixels}}),
        limit_mm_data_per_request=parse_mm_limits(images.get("limit_mm_data_per_request")),
        mm_splitting=_flag(images, "mm_splitting"),
        hybrid_tokens_per_second=_positive_float(hybrid, "tokens_per_second"),
        hybrid_floor_seconds=_non_negative_float(hybrid, "floor_seconds"),
        vision_seconds_per_patch=_non_negative_float(vision, "seconds_per_patch"),
        vision_seconds_per_patch_squared=_non_negative_float(vision, "seconds_per_patch_squared"),
        preprocess_seconds_per_megapixel=_non_negative_float(
            vision, "preprocess_seconds_per_megapixel"
        ),
    )


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
        images=_images(doc),
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
