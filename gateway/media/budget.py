"""The per-request byte budget shared by all of a request's images (data URLs and fetches)."""

from __future__ import annotations

from gateway.media.errors import MediaError


class RequestBudget:
    """Bytes one request's images may still use; fetches draw on it while they stream, so
    concurrent fetches cannot together hold more than the budget in memory."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._used = 0

    def take(self, size: int, where: str) -> None:
        self._used += size
        if self._used > self._max_bytes:
            raise MediaError(
                "media_request_too_large",
                where,
                f"with this image the request's images exceed {self._max_bytes:,} bytes in all; "
                "send fewer or smaller images.",
            )
