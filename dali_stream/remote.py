"""Remote sources (fsspec URLs: http(s)://, s3://, hf://, ...): range reads with retries, counters, no secrets.

`RemoteFS` wraps an fsspec filesystem with the few calls the loader makes (exists, glob, size, du, open).
`open` returns a `RangeFile`: a seekable read-only file that fetches aligned blocks with
`cat_file(path, start, end)`, so parquet footers, row groups and an episode's MP4 packets cost a few
range requests, never a whole-file download. Transient failures (timeouts, resets, truncated bodies,
HTTP 408/429/5xx) are retried with exponential backoff up to `max_retries`
(`DALI_STREAM_REMOTE_MAX_RETRIES`, default 5); then `RemoteError` names the URL (credentials removed)
and the last error.
"""

from __future__ import annotations

import io
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from .errors import RemoteError

ENV_MAX_RETRIES = "DALI_STREAM_REMOTE_MAX_RETRIES"
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class _Truncated(OSError):
    pass


def redact(url: str) -> str:
    """The URL without user:password@ and without token/signature query parameters."""
    url = re.sub(r"(?<=://)[^/@]+@", "", str(url))
    return re.sub(r"(?i)([?&](?:token|access_token|sig|signature|x-amz-[a-z-]+|key)=)[^&]*", r"\1***", url)


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    status = getattr(exc, "status", None) or getattr(exc, "code", None)
    if isinstance(status, int):
        return status in TRANSIENT_STATUS
    if isinstance(exc, (_Truncated, TimeoutError, ConnectionError)):
        return True
    names = {c.__name__ for c in type(exc).__mro__}
    # aiohttp.ClientError (resets, payload errors, disconnects), botocore connection/read timeouts
    return bool(names & {"ClientError", "ClientPayloadError", "ServerDisconnectedError", "ClientConnectionError",
                         "EndpointConnectionError", "ReadTimeoutError", "ConnectTimeoutError", "OSError"})


@dataclass
class RetryPolicy:
    max_retries: int = 5
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0

    @classmethod
    def from_env(cls, max_retries: int | None = None) -> "RetryPolicy":
        if max_retries is None:
            raw = os.environ.get(ENV_MAX_RETRIES)
            try:
                max_retries = int(raw) if raw is not None else 5
            except ValueError:
                from .errors import ConfigError

                raise ConfigError(f"{ENV_MAX_RETRIES}={raw!r} is not an integer; set it to e.g. 5") from None
        if max_retries < 0:
            from .errors import ConfigError

            raise ConfigError(f"`remote_max_retries` must be >= 0. Found: {max_retries}")
        return cls(max_retries=max_retries)


@dataclass
class RemoteStats:
    requests: int = 0
    retries: int = 0
    bytes: int = 0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self) -> dict:
        return {"requests": self.requests, "retries": self.retries, "bytes": self.bytes, "seconds": self.seconds}


class RemoteFS:
    """The calls the loader makes on a remote filesystem, each retried on transient errors."""

    def __init__(self, fs, policy: RetryPolicy, stats: RemoteStats | None = None, block_size: int = 1 << 18) -> None:
        self.fs = fs
        self.policy = policy
        self.stats = stats or RemoteStats()
        self.block_size = block_size
        self.protocol = fs.protocol
        self._sizes: dict[str, int] = {}  # files of a dataset do not change while it is read

    def _url(self, path: str) -> str:
        return path if "://" in path else f"{self.fs.protocol[0] if isinstance(self.fs.protocol, (tuple, list)) else self.fs.protocol}://{path}"

    def call(self, what: str, path: str, fn, *args):
        delay = self.policy.backoff_s
        t0 = time.perf_counter()
        for attempt in range(self.policy.max_retries + 1):
            try:
                with self.stats.lock:
                    self.stats.requests += 1
                out = fn(*args)
                with self.stats.lock:
                    self.stats.seconds += time.perf_counter() - t0
                return out
            except Exception as exc:  # noqa: BLE001 - classified below
                if not is_transient(exc):
                    if isinstance(exc, FileNotFoundError):
                        raise FileNotFoundError(f"{redact(self._url(path))} does not exist") from None
                    raise RemoteError(f"{what} {redact(self._url(path))} failed: {type(exc).__name__}: "
                                      f"{redact(str(exc))}") from None
                if attempt == self.policy.max_retries:
                    raise RemoteError(
                        f"{what} {redact(self._url(path))} failed {attempt + 1} times over "
                        f"{time.perf_counter() - t0:.1f}s; last error {type(exc).__name__}: {redact(str(exc))}. "
                        f"Check the network and credentials, or allow more retries ({ENV_MAX_RETRIES} or "
                        "remote_max_retries=)") from None
                with self.stats.lock:
                    self.stats.retries += 1
                time.sleep(delay)
                delay = min(self.policy.max_backoff_s, delay * 2)

    # ---- the filesystem surface the loader uses ---------------------------------------------------------
    def exists(self, path: str) -> bool:
        return self.call("checking", path, self.fs.exists, path)

    def glob(self, pattern: str) -> list[str]:
        return self.call("listing", pattern, self.fs.glob, pattern)

    def size(self, path: str) -> int:
        size = self._sizes.get(path)
        if size is None:
            size = self._sizes[path] = int(self.call("sizing", path, self.fs.size, path))
        return size

    def du(self, path: str) -> int:
        return int(self.call("sizing", path, self.fs.du, path))

    def read_range(self, path: str, start: int, end: int) -> bytes:
        def fetch():
            data = self.fs.cat_file(path, start=start, end=end)
            if len(data) != end - start:
                raise _Truncated(f"got {len(data)} of {end - start} bytes")
            return data

        data = self.call("reading", path, fetch)
        with self.stats.lock:
            self.stats.bytes += len(data)
        return data

    def open(self, path: str, mode: str = "rb") -> "RangeFile":
        if mode != "rb":
            raise ValueError(f"remote sources are read-only; mode {mode!r}")
        return RangeFile(self, path, self.size(path))


class RangeFile(io.RawIOBase):
    """Seekable read-only view of a remote file, fetched in aligned blocks (a few kept)."""

    def __init__(self, rfs: RemoteFS, path: str, size: int, keep_blocks: int = 8) -> None:
        super().__init__()
        self.rfs, self.path, self.size, self.pos = rfs, path, size, 0
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._keep = keep_blocks

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def _block(self, index: int) -> bytes:
        data = self._blocks.get(index)
        if data is None:
            bs = self.rfs.block_size
            start = index * bs
            data = self.rfs.read_range(self.path, start, min(self.size, start + bs))
            self._blocks[index] = data
            while len(self._blocks) > self._keep:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(index)
        return data

    def readinto(self, buffer) -> int:
        want = min(len(buffer), max(0, self.size - self.pos))
        done = 0
        bs = self.rfs.block_size
        while done < want:
            index, offset = divmod(self.pos, bs)
            chunk = self._block(index)[offset:offset + want - done]
            buffer[done:done + len(chunk)] = chunk
            done += len(chunk)
            self.pos += len(chunk)
        return done

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self.size - self.pos
        buf = bytearray(max(0, min(size, self.size - self.pos)))
        n = self.readinto(buf)
        return bytes(buf[:n])
