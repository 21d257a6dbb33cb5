"""audiogate errors as HTTP answers: a status code and one JSON error shape.

``{"error": {"type": <class name>, "code": <error code>, "reason": <metrics reason>,
"message": ..., "clip_index": <int or null>, ...}}`` with ``limit`` / ``actual`` /
``maximum`` for a limit, ``origin`` for an acquisition error and ``checkpoint`` for a
cancellation, where present. ``code`` is the library's one vocabulary
(:func:`audiogate.errors.error_code`: the batch output's ``error_code`` too), ``reason``
the metrics label it is counted under.

Bad input is never a 500: only a :class:`~audiogate.errors.PluginError` (a family plugin
broke its contract: a server bug) and exceptions audiogate did not raise on purpose are,
and the latter get a generic message (the details go to the log).
"""

from __future__ import annotations

import logging
from typing import Any, Final

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from audiogate.errors import (
    AudioGateError,
    AudioInputError,
    LimitError,
    MissingExtraError,
    PluginError,
    PreprocessCancelled,
    QueueFullError,
    RequestError,
    SizeOverflowError,
    SourceBusyError,
    SourceLostError,
    SourceNotFoundError,
    SourceRetiredError,
    StreamTimeoutError,
    WorkerUnavailableError,
    error_code,
)
from audiogate.metrics import rejection_reason
from audiogate.server.responses import json_response

__all__ = [
    "RETRY_AFTER_SECONDS",
    "STATUS_CLIENT_CLOSED",
    "BadRequestError",
    "RequestTimeoutError",
    "ServerConfigError",
    "UnauthorizedError",
    "error_payload",
    "error_response",
    "http_error",
    "reason_for",
    "status_for",
]

log = logging.getLogger("audiogate.server")

#: nginx's "client closed request": logged when the client went away; nothing is sent.
STATUS_CLIENT_CLOSED: Final = 499
#: ``Retry-After`` of a 429 (the queue drains in well under a second per job).
RETRY_AFTER_SECONDS: Final = 1

_EXTRA_FIELDS: Final = ("limit", "actual", "maximum", "origin", "checkpoint")


class BadRequestError(RequestError):
    """The HTTP request is not a prepare request: body, JSON or shape.

    :param field: the JSON path concerned (``"messages"``, ``"audiogate.feature_format"``).
    """

    code = "bad_request"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        self.detail = message
        AudioGateError.__init__(self, message)


class RequestTimeoutError(BadRequestError):
    """The request body stalled: no bytes arrived within the server's idle timeout."""

    code = "request_timeout"

    def __init__(self, message: str) -> None:
        super().__init__(message, field=None)


class UnauthorizedError(BadRequestError):
    """The request has no bearer token the server knows (``--auth-tokens``): 401."""

    code = "unauthorized"

    def __init__(self, message: str) -> None:
        super().__init__(message, field="authorization")


class ServerConfigError(AudioGateError):
    """The server's own configuration is unusable (e.g. ``--media-path`` is not a
    directory): the server refuses to start. Never a request's answer."""

    code = "server_config"


def reason_for(error: BaseException) -> str:
    """The ``reason`` label an error is counted under (``feature_panic`` for a server bug)."""
    return rejection_reason(error)


def status_for(error: BaseException) -> int:
    """The HTTP status of an error (the table in docs/server.md)."""
    if isinstance(error, PreprocessCancelled):
        return STATUS_CLIENT_CLOSED
    if isinstance(error, RequestTimeoutError | StreamTimeoutError):
        return 408
    if isinstance(error, UnauthorizedError):
        return 401
    if isinstance(error, SourceNotFoundError):
        return 404
    if isinstance(error, SourceRetiredError | SourceLostError):
        return 410
    if isinstance(error, SourceBusyError):
        return 409
    if isinstance(error, QueueFullError):
        return 429
    if isinstance(error, WorkerUnavailableError):
        return 503
    if isinstance(error, LimitError | SizeOverflowError):
        return 413
    if isinstance(error, PluginError):
        return 500
    if isinstance(error, MissingExtraError) and not isinstance(error, AudioInputError):
        return 500  # the installation lacks it, not the input (a clip's codecs: 400)
    if isinstance(error, AudioGateError):
        return 400
    return 500


def error_payload(error: BaseException) -> dict[str, Any]:
    """The JSON error body of ``error``; unexpected exceptions get a generic message."""
    if not isinstance(error, AudioGateError):
        return {
            "error": {
                "type": "InternalServerError",
                "code": error_code(error),
                "reason": reason_for(error),
                "message": "internal server error (logged on the server)",
                "clip_index": None,
            }
        }
    body: dict[str, Any] = {
        "type": type(error).__name__,
        "code": error_code(error),
        "reason": reason_for(error),
        "message": str(error),
        "clip_index": getattr(error, "clip_index", None),
    }
    if isinstance(error, BadRequestError) and error.field is not None:
        body["field"] = error.field
    for name in _EXTRA_FIELDS:
        value = getattr(error, name, None)
        if value is not None:
            body[name] = value if isinstance(value, int | float | str | bool) else str(value)
    return {"error": body}


def error_response(error: Exception, *, close: bool) -> Response:
    """The JSON answer of a failed request (logged when it is a server error).

    :param close: the rest of the body was never read: the connection cannot be reused.
    """
    status = status_for(error)
    if status >= 500 and not isinstance(error, AudioGateError):
        log.error("unexpected error preparing a request", exc_info=error)
    elif status >= 500:
        log.error("%s", error)
    headers: dict[str, str] = {}
    if status == 429:
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    if close:
        headers["Connection"] = "close"
    return json_response(status, error_payload(error), headers)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own HTTP errors (404, 405, ...) in the same JSON error shape."""
    assert isinstance(exc, HTTPException)
    payload = {
        "error": {
            "type": "HTTPException",
            "code": None,
            "reason": None,
            "message": exc.detail,
            "clip_index": None,
        }
    }
    return json_response(exc.status_code, payload, exc.headers)
