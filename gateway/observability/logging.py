"""Logging setup: secrets never reach a log line, and prompts only when asked for.

`RedactingFilter` sits on the root handlers, so every logger (ours, uvicorn's, httpx's) passes
through it: configured API keys and anything after `Bearer ` are replaced, and a record is cut
to a bounded length so a prompt quoted in an exception cannot flood the log. Request bodies are
logged only through `log_body`, which does nothing unless `security.log_bodies` is on and the
level is debug.

A line written while a traced request runs (gateway.middleware makes its server span current:
uvicorn's access line with `observability.access_log`, a refusal, an error) ends with
` trace_id=<32 hex>`, the id the client got in `x-flashbox-trace-id`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from opentelemetry.trace import get_current_span

REDACTED = "[REDACTED]"
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s'\",]+")
_AUTH_HEADER = re.compile(r"(?i)((?:authorization|x-api-key)['\"]?\s*[:=,]\s*['\"]?)[^'\"\n]+")


class RedactingFilter(logging.Filter):
    def __init__(self, secrets: Sequence[str], *, max_chars: int) -> None:
        super().__init__()
        # Longest first, so a key that contains another is replaced whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._max_chars = max_chars

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
        text = _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
        if len(text) > self._max_chars:
            text = f"{text[: self._max_chars]}... [{len(text) - self._max_chars} chars cut]"
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        # Formatted once here, so arguments (headers, exception text) are redacted too.
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg = self.redact(message)
        record.args = None
        # One context lookup; only requests traced (tracing on, sampled) have a valid span.
        span = get_current_span().get_span_context()
        if span.is_valid and span.trace_flags.sampled:
            record.msg += f" trace_id={span.trace_id:032x}"
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


def configure_logging(
    level: str, secrets: Sequence[str], *, max_chars: int = 4096
) -> RedactingFilter:
    """Root logging for `python -m gateway`; returns the filter (tests inspect it)."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s", force=True
    )
    redactor = RedactingFilter(secrets, max_chars=max_chars)
    for handler in logging.getLogger().handlers:
        handler.addFilter(redactor)
    # httpx logs every engine request at INFO: far too much on the hot path.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    return redactor


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's loggers propagate to the root handlers (and their filter) instead of their own."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "loggers": {
            name: {"handlers": [], "propagate": True}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }


def log_body(logger: logging.Logger, enabled: bool, what: str, body: bytes) -> None:
    """A request or response body, only when `security.log_bodies` and debug level are both on."""
    if enabled and logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s body: %s", what, body.decode("utf-8", errors="replace"))
