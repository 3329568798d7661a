"""`image_data` on /generate, checked and loaded as sglang-kt 0.7.2 does for this model.

The checks, their order and their wording follow the engine (../shared/docs/MEDIA.md 2.2, 3.1,
3.2): `tokenizer_manager._validate_glm5_next_mm_boundary` and `_validate_mm_limits`, then the
adapter's `_process_image_data` (multimodal/processors/glm5_next.py), then `load_image`
(utils/common.py) for every image, then the resize rule's aspect-ratio check.

Two kinds of failure, as in the engine:
- MediaValueError, the engine's ValueError: a 400 without streaming; with streaming, an HTTP 200
  whose stream holds one `data: {"error": {"message"}}` event and `[DONE]`.
- ImageLoadError, the engine's RuntimeError from loading an image: not caught there, so a bare
  500 without streaming, and a stream cut after its 200 with streaming. The engine's message
  holds the whole image string; the simulator's elides it.

Simulator policy (a 400, not the engine's behaviour): it never fetches http(s) URLs nor reads
file:// or local paths (the engine does all three, MEDIA.md 3.2), and it does not model video.
"""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import dataclass
from typing import Any

from PIL import Image

from engine.sim.images import ImageSize, size_image
from engine.sim.profile import ImageProfile
from engine.sim.requests import GenerateParams, RawMedia, SimRequestError

# load_image takes a string with one of these endings for a local file path, before it
# looks for `data:` (utils/common.py): a data URL that happens to end so fails.
PATH_SUFFIXES = ("png", "jpg", "jpeg", "webp", "gif")
PATH_MAX = 4096  # Linux: longer paths fail with ENAMETOOLONG before any lookup
SHOWN_CHARS = 48


class MediaValueError(SimRequestError):
    """The engine's ValueError for a multimodal request."""


class ImageLoadError(Exception):
    """The engine's RuntimeError while loading image `index`."""

    def __init__(self, index: int, item: object, cause: str) -> None:
        self.message = (
            f"An exception occurred while loading IMAGE data at index {index}: "
            f"Error while loading data {_shown(item)}: {cause}"
        )
        super().__init__(self.message)


def _shown(item: object) -> str:
    if isinstance(item, str) and len(item) > SHOWN_CHARS:
        return f"{item[:SHOWN_CHARS]}...({len(item)} chars)"
    return str(item)


@dataclass(frozen=True)
class ImageRequest:
    """What the engine's checks let through: the image items, in prompt order."""

    items: tuple[str | None, ...]


def has_valid_data(data: Any) -> bool:
    """multimodal/mm_utils.py has_valid_data: None and lists of only None are no data."""
    if data is None:
        return False
    if isinstance(data, list):
        return any(has_valid_data(item) for item in data)
    return True


def _count(data: Any) -> int:
    return len(data) if isinstance(data, list) else int(data is not None)


def _as_list(data: Any) -> list[Any]:
    return data if isinstance(data, list) else [data]


def _item_types(images: list[Any]) -> None:
    for index, item in enumerate(images):
        if isinstance(item, list):
            raise SimRequestError(
                "batch (nested list) image_data is not supported; send one list of strings",
                "image_data",
            )
        if item is not None and not isinstance(item, str | dict):
            raise SimRequestError(
                f"image_data[{index}] must be a string (a data: URL or base64)", "image_data"
            )


def _placeholders(params: GenerateParams, images: ImageProfile) -> tuple[int, int]:
    if params.text is not None:
        return params.text.count(images.image_token), params.text.count(images.video_token)
    ids = params.input_ids or []
    return ids.count(images.image_token_id), ids.count(images.video_token_id)


def check_media(params: GenerateParams, images: ImageProfile) -> ImageRequest | None:
    """The engine's checks before any image is loaded; None for a text-only request."""
    raw = params.media
    if raw is None or not (
        has_valid_data(raw.image_data)
        or has_valid_data(raw.video_data)
        or has_valid_data(raw.audio_data)
    ):
        return None
    _top_level_types(raw)
    image_count, video_count = _count(raw.image_data), _count(raw.video_data)
    if _count(raw.audio_data):
        raise MediaValueError("GLM-5-Next does not support audio input.", "audio_data")
    if image_count and video_count:
        raise MediaValueError(
            "GLM-5-Next requests cannot mix image and video content.", "video_data"
        )
    bound = images.max_images_per_request
    if image_count > bound:
        raise MediaValueError(
            f"GLM-5-Next accepts at most {bound} images per request; got {image_count}.",
            "image_data",
        )
    if video_count > 1:
        raise MediaValueError(
            f"GLM-5-Next accepts at most one video per request; got {video_count}.",
            "video_data",
        )
    for modality, limit in (images.limit_mm_data_per_request or {}).items():
        count = {"image": image_count, "video": video_count}.get(modality, 0)
        if count > limit:
            raise MediaValueError(
                f"{modality.capitalize()} count {count} exceeds limit {limit} per request.",
                f"{modality}_data",
            )
    if video_count:
        raise SimRequestError(
            "the simulator does not model video input (video_data); the engine takes one "
            "video per request",
            "video_data",
        )
    items = _as_list(raw.image_data)
    _item_types(items)
    if any(isinstance(item, dict) for item in items):
        raise MediaValueError(
            "GLM-5-Next does not accept processor_output or precomputed_embedding image inputs.",
            "image_data",
        )
    image_placeholders, video_placeholders = _placeholders(params, images)
    if video_placeholders:
        raise MediaValueError(
            "GLM-5-Next image request unexpectedly contains a video placeholder.", "text"
        )
    if image_placeholders != image_count:
        raise MediaValueError(
            "GLM-5-Next image count/placeholder count mismatch: "
            f"images={image_count}, placeholders={image_placeholders}.",
            "image_data",
        )
    return ImageRequest(tuple(items))


def _top_level_types(raw: RawMedia) -> None:
    for name, value in (
        ("image_data", raw.image_data),
        ("video_data", raw.video_data),
        ("audio_data", raw.audio_data),
    ):
        if value is not None and not isinstance(value, str | dict | list):
            raise SimRequestError(f"{name} must be a string or a list of strings", name)


def _image_bytes(item: str | None) -> bytes:
    """load_image's branches for a string, in its order (utils/common.py)."""
    if item is None:
        # As the engine: load_image calls str methods on its argument.
        raise AttributeError("'NoneType' object has no attribute 'startswith'")
    if item.startswith(("http://", "https://", "file://")):
        raise SimRequestError(
            "the simulator does not fetch image URLs or read files; send image_data as data: "
            "URLs (the engine would fetch http(s) itself, with no allow-list, and read file://)",
            "image_data",
        )
    if item.lower().endswith(PATH_SUFFIXES):
        # A file name has a dot; base64 never does.
        if not item.startswith("data:") and "." in item:
            raise SimRequestError(
                "the simulator does not read local files; send image_data as data: URLs "
                "(the engine would open this string as a path on its host)",
                "image_data",
            )
        # Base64 that happens to end like a file name: the engine opens it as a path, and fails.
        if len(item.encode()) >= PATH_MAX:
            raise OSError(36, "File name too long", item)
        raise FileNotFoundError(2, "No such file or directory", item)
    if item.startswith("data:"):
        item = item.split(",")[1]
    return base64.b64decode(item, validate=True)


def _load_one(item: str | None, index: int, max_pixels: int) -> ImageSize:
    try:
        raw = _image_bytes(item)
        with Image.open(io.BytesIO(raw)) as image:
            # The engine converts to RGB (dropping alpha) and the processor reads every pixel:
            # a truncated or corrupt image fails here as it does there.
            rgb = image.convert("RGB")
            width, height = image.size
    except SimRequestError:
        raise
    except Exception as exc:
        # The engine wraps whatever loading raised into one RuntimeError (base_processor.py
        # _load_single_item), and so does this: the message is all that differs.
        raise ImageLoadError(index, item, _cause(item, exc)) from exc
    digest = hashlib.blake2b(rgb.tobytes(), digest_size=16, person=b"sim-pixels").digest()
    try:
        return size_image(width, height, digest, max_pixels)
    except ValueError as exc:
        raise MediaValueError(str(exc), "image_data") from None


def _cause(item: str | None, exc: Exception) -> str:
    text = str(exc)
    if isinstance(item, str) and item in text:
        text = text.replace(item, _shown(item))
    return text


def load_images(request: ImageRequest, max_pixels: int) -> list[ImageSize]:
    """Decode every image (blocking: run it in a worker thread). Loading fails on the first
    bad image in order; the aspect-ratio check runs once all are loaded, as in the engine."""
    loaded: list[ImageSize | MediaValueError] = []
    for index, item in enumerate(request.items):
        try:
            loaded.append(_load_one(item, index, max_pixels))
        except MediaValueError as exc:
            loaded.append(exc)
    sizes: list[ImageSize] = []
    for entry in loaded:
        if isinstance(entry, MediaValueError):
            raise entry
        sizes.append(entry)
    return sizes
