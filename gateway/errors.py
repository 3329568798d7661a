"""The gateway's one exception hierarchy.

Every failure a request can meet is one of these; `gateway.app` maps them to OpenAI-shaped
JSON (`{"error": {"message", "type", "param", "code"}}`) in one place. 4xx classes are the
client's fault and their message says what to fix; 5xx classes are ours or the engine's.
"""

from __future__ import annotations

import re
from typing import Any


class GatewayError(Exception):
    """Base class: carries everything needed to answer the client."""

    status_code: int = 500
    error_type: str = "server_error"
    default_code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers = headers or {}

    def to_body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequestError(GatewayError):
    """The request is malformed or asks for something we do not support (400)."""

    status_code = 400
    error_type = "invalid_request_error"


class EngineRefusalError(InvalidRequestError):
    """The engine refused the request as sent (a 400 of its own, or sglang-kt's in-stream
    error event before any output): the client's fault, never the replica's."""

    default_code = "engine_rejected_request"

    def __init__(self, engine_message: str) -> None:
        super().__init__(f"The engine rejected the request: {engine_message}")
        self.engine_message = engine_message


class TemplateInputError(InvalidRequestError):
    """The chat template rejected the conversation (raise_exception, bad types, bad ids)."""

    default_code = "invalid_template_input"


class ContextLengthError(InvalidRequestError):
    """The prompt (with the output it asks for) does not fit in the engine's context.

    Faces word it their own way: Claude Code compacts a conversation on Anthropic's
    "prompt is too long: N tokens > M maximum".
    """

    default_code = "context_length_exceeded"

    def __init__(
        self,
        prompt_tokens: int,
        context_length: int,
        message: str | None = None,
        *,
        output_tokens: int | None = None,
    ) -> None:
        super().__init__(
            message
            or f"The prompt has {prompt_tokens} tokens; this model's context is "
            f"{context_length} tokens. Shorten the conversation.",
            param="messages",
        )
        self.prompt_tokens = prompt_tokens
        self.context_length = context_length
        # Set when the prompt fits but not with the output it asked for.
        self.output_tokens = output_tokens


# The engine's refusals of a prompt that does not fit (sglang-kt 0.7.2's
# tokenizer_manager._validate_one_request wording; the simulator uses the same).
_INPUT_TOO_LONG = re.compile(
    r"input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens"
)
_TOTAL_TOO_LONG = re.compile(
    r"maximum context length of (\d+) tokens\. You requested a total of \d+ tokens: "
    r"(\d+) tokens from the input messages and (\d+) tokens"
)


def context_error(engine_message: str) -> ContextLengthError | None:
    """The engine's message as a ContextLengthError, when it is one of its context refusals."""
    message = f"The engine rejected the request: {engine_message}"
    found = _INPUT_TOO_LONG.search(engine_message)
    if found:
        return ContextLengthError(int(found.group(1)), int(found.group(2)), message)
    found = _TOTAL_TOO_LONG.search(engine_message)
    if not found:
        return None
    context, prompt, output = (int(group) for group in found.groups())
    return ContextLengthError(prompt, context, message, output_tokens=output)


class AuthenticationError(GatewayError):
    status_code = 401
    error_type = "authentication_error"
    default_code = "invalid_api_key"


class PermissionDeniedError(GatewayError):
    status_code = 403
    error_type = "permission_error"


class NotFoundError(GatewayError):
    status_code = 404
    error_type = "invalid_request_error"
    default_code = "not_found"


class PayloadTooLargeError(GatewayError):
    status_code = 413
    error_type = "invalid_request_error"
    default_code = "payload_too_large"


class RateLimitError(GatewayError):
    """Admission control is full: the client should retry after Retry-After."""

    status_code = 429
    error_type = "rate_limit_error"


class UpstreamError(GatewayError):
    """The engine answered badly (5xx, malformed stream) before we could serve anything."""

    status_code = 502
    error_type = "upstream_error"


class NoReplicaError(GatewayError):
    """No healthy engine replica can take the request right now."""

    status_code = 503
    error_type = "service_unavailable"
    default_code = "no_healthy_replica"


class UpstreamTimeoutError(GatewayError):
    status_code = 504
    error_type = "upstream_timeout"


class EngineUnreachableError(NoReplicaError):
    """The chosen replica refused or dropped the connection before answering (503)."""

    default_code = "engine_unreachable"


class UpstreamStreamError(UpstreamError):
    """The engine's stream broke or reported an error after the response had started."""

    default_code = "engine_stream_error"


class InternalError(GatewayError):
    """A bug of ours met while serving (an unexpected exception): 500, logged with its trace."""

    default_code = "internal_error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message
            or "The gateway failed while serving this request (a bug; its log has the trace "
            "under this request's id). Retrying may work."
        )


class ClientDisconnected(Exception):
    """The client went away; not an error to answer, a reason to abort upstream work."""
