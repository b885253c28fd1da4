"""Which failed remote reads are worth another attempt (`is_transient`: timeouts, resets, truncated bodies, HTTP
408/429/5xx), how long a throttling server asks to wait before it (`retry_after_s`), and how hard a read tries
(`RetryPolicy`). `remote.RemoteFS.call` retries by them."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from dataclasses import dataclass


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


ENV_MAX_RETRIES = "DALI_STREAM_REMOTE_MAX_RETRIES"
ENV_TIMEOUT = "DALI_STREAM_REMOTE_TIMEOUT_S"
ENV_DEADLINE = "DALI_STREAM_REMOTE_DEADLINE_S"


@dataclass
class RetryPolicy:
    """How hard a remote read tries: `max_retries` after the first attempt, exponential backoff from
    `backoff_s` up to `max_backoff_s` with jitter (each sleep x0.5..1.5, so 64 ranks hit by the same outage
    do not retry in lock-step), `timeout_s` per attempt (enforced for asynchronous fsspec filesystems: http,
    s3; others use their client's own timeouts), and `deadline_s` for all attempts of one read together
    (None: no limit but the retries'). The worst case before `RemoteError` (`worst_case_s`) is the deadline,
    or (max_retries + 1) * timeout_s plus the longest backoff sleeps."""

    max_retries: int = 5
    timeout_s: float = 60.0
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    deadline_s: float | None = None
    JITTER = (0.5, 1.5)

    @property
    def worst_case_s(self) -> float:
        sleeps = sum(self.JITTER[1] * min(self.max_backoff_s, self.backoff_s * 2 ** k) for k in range(self.max_retries))
        worst = (self.max_retries + 1) * self.timeout_s + sleeps
        return worst if self.deadline_s is None else min(worst, self.deadline_s)

    def describe(self) -> str:
        """The policy as the settings that set it, for error messages."""
        deadline = "none" if self.deadline_s is None else f"{self.deadline_s:g}s"
        return (f"retry policy: remote_max_retries={self.max_retries}, remote_timeout_s={self.timeout_s:g}, "
                f"remote_deadline_s={deadline}")

    def sleep_s(self, attempt: int, rng) -> float:
        """The pause after failed attempt `attempt` (0-based): exponential, capped, jittered by `rng`."""
        return min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * rng.uniform(*self.JITTER)

    @classmethod
    def from_env(cls, max_retries: int | None = None, timeout_s: float | None = None,
                 deadline_s: float | None = None) -> "RetryPolicy":
        from ..errors import ConfigError

        def env(name: str, kind, default, example: str):
            raw = os.environ.get(name)
            if raw is None:
                return default
            try:
                return kind(raw)
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not {example}") from None

        if max_retries is None:
            max_retries = env(ENV_MAX_RETRIES, int, 5, "an integer; set it to e.g. 5")
        if timeout_s is None:
            timeout_s = env(ENV_TIMEOUT, float, 60.0, "a number of seconds; set it to e.g. 60")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"`remote_max_retries` must be an integer >= 0. Found: {max_retries!r}")
        if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ConfigError(f"`remote_timeout_s` must be a number of seconds > 0. Found: {timeout_s!r}")
        if deadline_s is None:
            deadline_s = env(ENV_DEADLINE, float, None, "a number of seconds; set it to e.g. 600")
        if deadline_s is not None and (not isinstance(deadline_s, (int, float)) or deadline_s <= 0):
            raise ConfigError(f"`remote_deadline_s` must be a number of seconds > 0. Found: {deadline_s!r}")
        return cls(max_retries=max_retries, timeout_s=float(timeout_s),
                   deadline_s=None if deadline_s is None else float(deadline_s))
