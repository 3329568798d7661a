"""Checking an image's bytes with Pillow and building what the engine receives.

Synchronous and CPU-bound: gateway/media/resolver.py runs it in a worker thread when the image
is large (Pillow's decoders, zlib-ng, hashlib and pybase64 release the GIL while they work). Order
matters for cost: the format is sniffed from the magic bytes, the size read from the header,
and the pixel, aspect-ratio and token bounds applied, all before a single pixel is decoded; only
then verify() and the pixel-data check (truncated or corrupt files), at the least cost that
still reads all of the data the engine's decoder will: a PNG's rows inflated but not
unfiltered (gateway/media/png.py), a JPEG decoded at 1/8 scale, a WebP decoded.
"""

from __future__ import annotations

import binascii
import hashlib
import io
from dataclasses import dataclass

import pybase64
from PIL import Image, ImageOps

from gateway.media.data_url import DataUrl
from gateway.media.errors import MediaError
from gateway.media.png import check_rows, rows_to_check
from gateway.media.refs import CheckedImage
from gateway.media.tokens import AspectRatioError, prompt_tokens

FORMAT_NAMES = {"PNG": "PNG", "JPEG": "JPEG", "WEBP": "WebP", "GIF": "GIF"}
# Pillow's name -> the data URL's image subtype.
_SUBTYPES = {"PNG": "png", "JPEG": "jpeg", "MPO": "jpeg", "WEBP": "webp"}
# sglang-kt's load_image treats any string ending in these (any case) as a local file path,
# before it tries the data-URL branch (../shared/docs/MEDIA.md 3.2).
_PATH_SUFFIXES = ("png", "jpg", "jpeg", "webp", "gif")
# Modes Pillow writes as PNG; anything else (CMYK, YCbCr, ...) is converted to RGB first.
_PNG_MODES = frozenset({"1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"})
_EXIF_ORIENTATION = 0x0112


@dataclass(frozen=True, slots=True)
class ImagePolicy:
    """The bounds one image is checked against (from MediaSettings)."""

    formats: frozenset[str]  # Pillow names: PNG, JPEG, WEBP, GIF
    max_pixels: int
    max_aspect_ratio: float
    engine_max_pixels: int
    full_decode: bool
    exif_transpose: bool


def sniff_format(data: bytes) -> str | None:
    """The container format from its magic bytes, before Pillow sees the file."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "GIF"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


def header_pixels(data: bytes, formats: frozenset[str]) -> int | None:
    """Width x height from the header alone (no pixel decoded), or None when there is no
    readable header: check_image then refuses the bytes just as cheaply."""
    kind = sniff_format(data)
    if kind is None or kind not in formats:
        return None
    try:
        with Image.open(io.BytesIO(data), formats=[kind]) as header:
            width, height = header.size
    except MemoryError:
        raise
    except Exception:
        # Any Pillow failure on the header (see _inspect): check_image reports it.
        return None
    return int(width) * int(height)


def check_image(
    data: bytes, policy: ImagePolicy, where: str, *, sent_as: DataUrl | None = None
) -> CheckedImage:
    """The checked image, or MediaError naming what is wrong with it. `sent_as` is the data
    URL the bytes were decoded from, when they came in one."""
    kind = sniff_format(data)
    if kind is None or kind not in policy.formats:
        allowed = ", ".join(FORMAT_NAMES[name] for name in sorted(policy.formats))
        found = f"a {FORMAT_NAMES[kind]} file" if kind else "not an image format we read"
        raise MediaError(
            "unsupported_image_format",
            where,
            f"the image is {found}; send one of: {allowed}.",
        )
    payload, subtype, width, height = _inspect(data, kind, policy, where)
    tokens = _tokens(width, height, policy, where)
    digest = hashlib.sha256(data).hexdigest()  # of the client's bytes, whatever is sent
    prefix = f"data:image/{subtype};base64,"
    if payload is data and sent_as is not None and _is_canonical(sent_as, prefix, data):
        # The client's string is exactly what encoding the checked bytes would produce
        # (proved in _is_canonical): reuse it rather than build the same megabytes again.
        data_url = sent_as.url
    else:
        data_url = encode_data_url(prefix, payload)
    if data_url[-4:].lower().endswith(_PATH_SUFFIXES):
        # One trailing byte makes the base64 end in "==", which no path suffix matches; the
        # decoders ignore bytes after the image's end marker (tested per format).
        payload += b"\0"
        data_url = encode_data_url(prefix, payload)
    return CheckedImage(
        data_url=data_url,
        digest=digest,
        width=width,
        height=height,
        format=subtype,
        size=len(payload),
        tokens=tokens,
    )


def encode_data_url(prefix: str, data: bytes) -> str:
    """prefix + the standard base64 of data (pybase64: SIMD, and the GIL released)."""
    return prefix + pybase64.b64encode_as_string(data)


def _is_canonical(sent_as: DataUrl, prefix: str, data: bytes) -> bool:
    """Whether the client's data URL equals prefix + b64encode(data). Its payload decoded
    strictly to data, and every 4-character group but the last encodes 3 bytes with no spare
    bits, so those groups are the only encoding of their bytes; only the last group's spare
    bits (before its padding) can differ, so comparing it settles the whole string."""
    url = sent_as.url
    if sent_as.start != len(prefix) or not url.startswith(prefix):
        return False
    tail = binascii.b2a_base64(data[-(len(data) % 3 or 3) :], newline=False).decode("ascii")
    return url.endswith(tail)


def _inspect(
    data: bytes, kind: str, policy: ImagePolicy, where: str
) -> tuple[bytes, str, int, int]:
    """(bytes to send, their subtype, width, height) after every Pillow check."""
    name = FORMAT_NAMES[kind]
    try:
        with Image.open(io.BytesIO(data), formats=[kind]) as header:
            width, height = header.size
            _check_size(width, height, policy, where)
            header.verify()
        if kind == "GIF" or policy.exif_transpose:
            return _decoded(data, kind, policy)
        if policy.full_decode:
            check_pixel_data(data, kind)
        return data, _SUBTYPES[kind], width, height
    except MediaError:
        raise
    except Image.DecompressionBombError:
        # Pillow's own guard (twice its MAX_IMAGE_PIXELS, ~179 Mpx) fired before our bound.
        raise MediaError(
            "image_too_many_pixels",
            where,
            f"the {name} image's header declares more than {policy.max_pixels:,} pixels; "
            "send a smaller image.",
        ) from None
    except MemoryError:
        raise
    except Exception as exc:
        # Pillow's decoders raise an open set of types on hostile input (OSError, SyntaxError,
        # ValueError, struct.error, EOFError, IndexError, ...): every one is the client's
        # file, so a 400, never a 500.
        raise MediaError(
            "bad_image",
            where,
            f"the {name} image could not be read ({_pillow_reason(exc)}); it may be truncated "
            "or corrupt. Send the complete file.",
        ) from None


def _decoded(data: bytes, kind: str, policy: ImagePolicy) -> tuple[bytes, str, int, int]:
    """The pixels themselves, for what needs them: a GIF's first frame and EXIF rotation are
    sent as a PNG the gateway writes."""
    with Image.open(io.BytesIO(data), formats=[kind]) as image:
        image.load()  # a GIF's first frame only: the engine sees one frame
        rotated = _exif_rotated(image) if policy.exif_transpose else None
        if kind != "GIF" and rotated is None:
            return data, _SUBTYPES[kind], image.width, image.height
        frame = rotated if rotated is not None else image
        return _as_png(frame), "png", frame.width, frame.height


def check_pixel_data(data: bytes, kind: str) -> None:
    """Reads all of the image data the engine's decoder will, so that a file it would fail on
    (truncated, corrupt) is refused here; raises what Pillow or png.check_rows raise."""
    plan = rows_to_check(data) if kind == "PNG" else None
    if plan is not None:
        check_rows(plan)
        return
    with Image.open(io.BytesIO(data), formats=[kind]) as image:
        if kind == "JPEG":
            # libjpeg decodes every scan's entropy-coded data whatever the scale (a truncated
            # or broken file fails the same way), but at 1/8 it skips most of the inverse DCT,
            # upsampling and colour conversion, and holds 1/64 of the pixels.
            image.draft(None, (1, 1))
        image.load()


def _check_size(width: int, height: int, policy: ImagePolicy, where: str) -> None:
    if width < 1 or height < 1:
        raise MediaError("bad_image", where, f"the image's size is {width}x{height}.")
    if width * height > policy.max_pixels:
        raise MediaError(
            "image_too_many_pixels",
            where,
            f"the image is {width}x{height} ({width * height:,} pixels); the limit is "
            f"{policy.max_pixels:,} pixels. Send a smaller image.",
        )
    ratio = max(width, height) / min(width, height)
    if ratio > policy.max_aspect_ratio:
        raise MediaError(
            "image_aspect_ratio",
            where,
            f"the image is {width}x{height}, an aspect ratio of {ratio:.1f}; the limit is "
            f"{policy.max_aspect_ratio:g}. Crop or pad it.",
        )


def _tokens(width: int, height: int, policy: ImagePolicy, where: str) -> int:
    try:
        return prompt_tokens(width, height, max_pixels=policy.engine_max_pixels)
    except AspectRatioError:
        # The engine's check after its own upscaling of tiny sides; ours passed on the raw size.
        raise MediaError(
            "image_aspect_ratio",
            where,
            f"the image is {width}x{height}; the engine refuses an aspect ratio over 200. "
            "Crop or pad it.",
        ) from None


def _exif_rotated(image: Image.Image) -> Image.Image | None:
    """The image turned upright per its EXIF orientation, or None when it already is."""
    orientation = image.getexif().get(_EXIF_ORIENTATION, 1)
    if orientation in (None, 1) or not 2 <= int(orientation) <= 8:
        return None
    return ImageOps.exif_transpose(image)


def _as_png(image: Image.Image) -> bytes:
    if image.mode not in _PNG_MODES:
        image = image.convert("RGB")
    out = io.BytesIO()
    # Level 1: this runs per request; the bytes only cross a local hop to the engine.
    image.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _pillow_reason(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:120]}" if text else type(exc).__name__
