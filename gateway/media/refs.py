"""What a face hands the media stage, and what the stage hands back."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ImageRef:
    """One image part found in a request, in request order."""

    # A data: URL or an http(s) URL, exactly as the client sent it (never logged: it may hold
    # megabytes of base64 or a signed query string).
    url: str
    # The part's location for error messages and `param`, e.g. "messages.2.content.1".
    where: str


@dataclass(frozen=True, slots=True)
class CheckedImage:
    """An image that passed every check, ready for /generate's image_data."""

    # Built by the gateway from the checked bytes ("data:image/png;base64,..."): the engine
    # never receives a client's string (it would open paths and fetch URLs itself).
    data_url: str
    # sha256 hex of the bytes as the client sent them: the image's identity for routing,
    # logs and de-duplication (cheap to compare, never the payload).
    digest: str
    # Of the image the engine will see (a GIF's first frame; after EXIF rotation when on).
    width: int
    height: int
    # The data URL's image type: "png", "jpeg" or "webp" (a GIF is sent as "png").
    format: str
    # Bytes in the data URL's payload.
    size: int
    # The engine's prompt tokens for this image: its smart_resize grid plus the begin/end
    # markers (gateway/media/tokens.py).
    tokens: int
