"""Which failed remote reads are worth another attempt (`is_transient`: timeouts, resets, truncated bodies, HTTP
408/429/5xx), and how long a throttling server asks to wait before it (`retry_after_s`). `remote.RemoteFS.call`
retries by them."""

from __future__ import annotations

import asyncio
import errno
import time


class Truncated(OSError):
    """A read answered with fewer bytes than it asked for (a body cut short): worth another attempt."""


TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# On Python 3.10 asyncio.TimeoutError (what asyncio.wait_for and fsspec's FSTimeoutError raise) is not the
# builtin TimeoutError; from 3.11 on it is the same class. Catch both, so a timed-out attempt is retried.
TIMEOUTS = (TimeoutError, asyncio.TimeoutError)


# Transient by class name: aiohttp (resets, payload errors, disconnects), botocore (connection and read timeouts),
# httpx / httpx2 (what huggingface_hub reads hf:// with: timeouts, failed connects, dropped connections).
_TRANSIENT_NAMES = frozenset({
    "ClientPayloadError", "ServerDisconnectedError", "ClientConnectionError", "ClientOSError",
    "EndpointConnectionError", "ReadTimeoutError", "ConnectTimeoutError",
    "TimeoutException", "ReadTimeout", "ConnectTimeout", "WriteTimeout", "PoolTimeout", "NetworkError",
    "ConnectError", "ReadError", "WriteError", "CloseError", "RemoteProtocolError",
})
# A plain OSError is transient only for these errnos (a reset or unreachable peer), never as a class. s3fs raises
# S3's 503 SlowDown / ServiceUnavailable as OSError(EBUSY) and its 500 InternalError as OSError(EREMOTEIO) once
# botocore's own retries are spent: throttling and server faults that a later attempt gets past.
_TRANSIENT_ERRNO = frozenset({errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED, errno.ETIMEDOUT,
                              errno.EPIPE, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EAGAIN,
                              errno.EBUSY, errno.EREMOTEIO})


def _status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (aiohttp's .status, botocore's .code, httpx's .response)."""
    readers = (lambda: getattr(exc, "status", None), lambda: getattr(exc, "code", None),  # noqa: E731
               lambda: getattr(getattr(exc, "response", None), "status_code", None))
    for read in readers:  # lazily: aiohttp warns when .code is read
        value = read()
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


RETRY_AFTER_MAX_S = 300.0  # the longest wait a server's Retry-After is honoured for


def retry_after_s(exc: BaseException) -> float | None:
    """The wait a 429/503 answer asks for in its Retry-After header (seconds, or an HTTP date), at most
    RETRY_AFTER_MAX_S; None without one (aiohttp's .headers, httpx's .response.headers, botocore's response)."""
    if _status(exc) not in (429, 503):
        return None
    response = getattr(exc, "response", None)
    headers = getattr(exc, "headers", None) or getattr(response, "headers", None) or (
        response.get("ResponseMetadata", {}).get("HTTPHeaders") if isinstance(response, dict) else None)
    if (raw := headers.get("Retry-After", headers.get("retry-after")) if headers else None) is None:
        return None
    try:
        wait = float(raw)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            wait = parsedate_to_datetime(str(raw)).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(wait, 0.0), RETRY_AFTER_MAX_S)


def is_transient(exc: BaseException) -> bool:
    """Whether retrying `exc` can help: timeouts, resets, truncated bodies, HTTP 408/429/5xx."""
    from ..errors import DaliStreamError

    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, DaliStreamError)):
        return False
    status = _status(exc)
    if status is not None:
        return status in TRANSIENT_STATUS
    if isinstance(exc, (Truncated, ConnectionError, *TIMEOUTS)):
        return True
    if {c.__name__ for c in type(exc).__mro__} & _TRANSIENT_NAMES:
        return True
    return type(exc) is OSError and exc.errno in _TRANSIENT_ERRNO
