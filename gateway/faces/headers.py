"""Reading the few request headers a face needs straight from the raw ASGI scope (no Headers
object: hop 1 runs before the engine sees a request, and every call there counts)."""

from __future__ import annotations

from collections.abc import Collection, Iterable


def read_headers(
    scope_headers: Iterable[tuple[bytes, bytes]], wanted: Collection[bytes]
) -> dict[bytes, str]:
    """The `wanted` headers (lower-case names, as ASGI gives them); the first value wins."""
    found: dict[bytes, str] = {}
    for name, value in scope_headers:
        if name in wanted and name not in found:
            found[name] = value.decode("latin-1")
    return found
