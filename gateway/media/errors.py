"""The media stage's refusals: one 400 per reason, whose code is the reason.

Every refusal names the part (`param` is the part's location) and says what to fix. The same
reasons label flashbox_media_rejected_total, so the set is fixed here and in
gateway/observability/metrics.py (MEDIA_REJECT_REASONS; a test keeps them equal).
"""

from __future__ import annotations

from typing import Literal

from gateway.errors import InvalidRequestError

Reason = Literal[
    "images_not_supported",  # the engines' model is text-only (/model_info)
    "too_many_images",  # more images than media.max_images (the engine's 8)
    "unsupported_image_source",  # file:, a bare path, raw base64, ftp: ... (only data: / http(s))
    "malformed_image_url",  # an http(s) URL that does not parse, has no host, or has userinfo
    "malformed_data_url",  # not data:image/<type>;base64,<payload>
    "invalid_base64",  # the payload is not strict, padded, standard-alphabet base64
    "unsupported_image_type",  # a data URL or response whose type is not image/*
    "unsupported_image_format",  # bytes that are not one of media.formats
    "image_too_large",  # over media.max_image_bytes
    "media_request_too_large",  # all images over media.max_request_bytes
    "image_too_many_pixels",  # header width x height over media.max_decoded_pixels
    "image_aspect_ratio",  # longer / shorter side over media.max_aspect_ratio (the engine's 200)
    "image_tokens_exceeded",  # all images' tokens over media.max_request_image_tokens
    "bad_image",  # truncated or corrupt: fails verify() or the full decode
    "remote_images_disabled",  # an http(s) URL while media.remote.enabled is false
    "image_host_not_allowed",  # the host is not in media.remote.allowed_hosts
    "insecure_image_url",  # http: while media.remote.allow_http is false
    "image_address_denied",  # the host resolves to a non-global address (loopback, private, ...)
    "image_redirect_denied",  # a redirect while they are off, or past max_redirects
    "image_fetch_timeout",  # connect or total timeout
    "image_fetch_failed",  # DNS failure, connection error, non-2xx status, encoded body
]


class MediaError(InvalidRequestError):
    """A request's image was refused (400); `reason` is also the error code."""

    def __init__(self, reason: Reason, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}", param=where, code=reason)
        self.reason: Reason = reason
        self.where = where
