"""Remote sources (fsspec URLs: http(s)://, s3://, hf://, ...): range reads with retries, counters, no secrets.

`RemoteFS` wraps an fsspec filesystem with the few calls the loader makes (exists, glob, size, du,
read_range, open). `open` returns a `RangeFile`: a seekable read-only file serving reads from pieces the
caller fetched in one request each (an episode's packets located by `mp4index`, a row group located by
the parquet footer) and fetching anything else with exact `cat_file(path, start, end)` requests, so a
file is never downloaded whole. Transient failures (timeouts, resets, truncated bodies,
HTTP 408/429/5xx: `transient`) are retried with exponential backoff up to `max_retries`
(`DALI_STREAM_REMOTE_MAX_RETRIES`, default 5), waiting at least what a 429/503's Retry-After asks; then
`RemoteError` names the URL (credentials removed) and the last error.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import logging
import os
import random
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from ..errors import RemoteError
from .transient import (  # noqa: F401 - RetryPolicy and the ENV_ names are read from here too
    ENV_DEADLINE,
    ENV_MAX_RETRIES,
    ENV_TIMEOUT,
    TIMEOUTS,
    RetryPolicy,
    Truncated,
    is_transient,
    retry_after_s,
)

log = logging.getLogger("dali_stream")
VERSION_TAGS = ("ETag", "blob_id", "VersionId", "Content-MD5", "Digest", "Last-Modified", "LastModified", "mtime")


def redact(url: str) -> str:
    """The URL without user:password@ and without token/signature query parameters."""
    url = re.sub(r"(?<=://)[^/@]+@", "", str(url))
    return re.sub(r"(?i)([?&](?:token|access_token|sig|signature|x-amz-[a-z-]+|key)=)[^&]*", r"\1***", url)


async def _within(coro_fn, timeout_s: float, args, kwargs, slots=None):
    """coro_fn(*args, **kwargs) cut off after `timeout_s`, started once one of `slots` (an asyncio.Semaphore: the
    requests a rank may have in flight) is free; waiting for it is not part of the attempt's time."""
    async with slots if slots is not None else contextlib.nullcontext():
        return await asyncio.wait_for(coro_fn(*args, **kwargs), timeout_s)  # cancels the request on timeout


async def _gather_ranges(cat_file, spans: list[tuple[str, int, int]], timeout_s: float, slots=None) -> list:
    """One attempt at every (path, start, end) at once: its bytes, or the exception it raised."""
    return await asyncio.gather(*(_within(cat_file, timeout_s, (path,), {"start": start, "end": end}, slots)
                                  for path, start, end in spans), return_exceptions=True)


@dataclass
class RemoteStats:
    requests: int = 0
    retries: int = 0
    throttled: int = 0  # retries that waited as the server's Retry-After asked (429/503)
    bytes: int = 0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self) -> dict:
        return {"requests": self.requests, "retries": self.retries, "throttled": self.throttled, "bytes": self.bytes,
                "seconds": self.seconds}


class RemoteFS:
    """The calls the loader makes on a remote filesystem, each retried on transient errors."""

    def __init__(self, fs, policy: RetryPolicy, stats: RemoteStats | None = None, disk=None,
                 concurrency: int | None = None) -> None:
        self._fs, self._pid = fs, os.getpid()
        self.policy = policy
        self.stats = stats or RemoteStats()
        self.disk = disk  # a `disk_tier.DiskTier` under the reads, or None
        # at most `concurrency` requests in flight from this process (None: no limit): on fsspec's event loop for an
        # asynchronous file system (http, s3, gcs), around each call otherwise
        self.concurrency = concurrency
        self._slots_made()
        self._rng = random.Random()  # jitter: seeded from the OS, different on every rank
        self._attempt = threading.local()  # this thread's current attempt's time limit
        self.protocol = fs.protocol
        self._sizes: dict[str, tuple[int, str]] = {}  # files of a dataset do not change while it is read

    def __reduce__(self) -> tuple:
        """Pickled (the metadata a spawned DataLoader worker gets): made again there from the file system (fsspec's
        own pickling: its class and arguments), the retry policy, the disk tier and the concurrency, with counters,
        slots and locks of its own."""
        return RemoteFS, (self._fs, self.policy, None, self.disk, self.concurrency)

    def _slots_made(self) -> None:
        self._async_slots = asyncio.Semaphore(self.concurrency) if self.concurrency else None
        self._thread_slots = threading.BoundedSemaphore(self.concurrency) if self.concurrency else None

    @property
    def fs(self):
        """The fsspec file system, made again in a forked process (a DataLoader's worker): an asynchronous one's
        event loop and connections are the parent's."""
        if os.getpid() != self._pid:
            fs = self._fs
            self._fs, self._pid = type(fs)(*fs.storage_args, **fs.storage_options), os.getpid()
            self._slots_made()
        return self._fs

    def counts(self) -> dict:
        """`stats` and, with or without a disk tier, the tier's (`disk_tier.DiskStats`: zeros where none)."""
        from .disk_tier import DiskStats

        return {**self.stats.as_dict(), **(self.disk.stats if self.disk is not None else DiskStats()).as_dict()}

    def _url(self, path: str) -> str:
        return path if "://" in path else f"{self.fs.protocol[0] if isinstance(self.fs.protocol, (tuple, list)) else self.fs.protocol}://{path}"

    def invoke(self, name: str, *args, **kwargs):
        """fs.<name>(*args, **kwargs), one attempt, cut off after the policy's timeout where fsspec allows."""
        coro_fn = getattr(self.fs, "_" + name, None)
        if getattr(self.fs, "async_impl", False) and coro_fn is not None and getattr(self.fs, "loop", None):
            from fsspec.asyn import sync

            limit = getattr(self._attempt, "timeout_s", self.policy.timeout_s)
            try:
                return sync(self.fs.loop, _within, coro_fn, limit, args, kwargs, self._async_slots)
            except TIMEOUTS:  # fsspec re-raises it as its FSTimeoutError, without a message
                raise TimeoutError(f"no answer within {limit:g}s (remote_timeout_s / {ENV_TIMEOUT}, or what "
                                   "was left of remote_deadline_s)") from None
        with self._slot():
            return getattr(self.fs, name)(*args, **kwargs)

    def _slot(self):
        """One of this process's request slots for a synchronous call (a no-op without a limit)."""
        return self._thread_slots if self._thread_slots is not None else contextlib.nullcontext()

    def call(self, what: str, path: str, fn, *args):
        policy = self.policy
        t0 = time.perf_counter()
        for attempt in range(policy.max_retries + 1):
            left = None if policy.deadline_s is None else policy.deadline_s - (time.perf_counter() - t0)
            self._attempt.timeout_s = policy.timeout_s if left is None else max(0.001, min(policy.timeout_s, left))
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
                                      f"{redact(str(exc))} (not retried: the error is not transient; "
                                      f"{policy.describe()})") from None
                asked = retry_after_s(exc)  # a throttling server's own wait, where longer than the backoff
                pause = max(policy.sleep_s(attempt, self._rng), asked or 0.0)
                spent = time.perf_counter() - t0
                past_deadline = policy.deadline_s is not None and spent + pause >= policy.deadline_s
                if attempt == policy.max_retries or past_deadline:
                    why = (f"the deadline of {policy.deadline_s:g}s ({ENV_DEADLINE} or remote_deadline_s=) left no "
                           "time for another attempt" if past_deadline else
                           f"allow more retries ({ENV_MAX_RETRIES} or remote_max_retries=)")
                    gave_up = RemoteError(
                        f"{what} {redact(self._url(path))} failed {attempt + 1} times over {spent:.1f}s; last "
                        f"error {type(exc).__name__}: {redact(str(exc))} ({policy.describe()}). The file itself "
                        f"may be whole: check the network and credentials, or {why}")
                    gave_up.retried = True  # every attempt the policy allows was made (`exists` asks)
                    raise gave_up from None
                with self.stats.lock:
                    self.stats.retries += 1
                    self.stats.throttled += asked is not None
                log.warning("%s %s failed (%s: %s), retry %d of %d in %.2f s%s", what, redact(self._url(path)),
                            type(exc).__name__, redact(str(exc))[:200], attempt + 1, policy.max_retries, pause,
                            "" if asked is None else f" (the server's Retry-After: {asked:g} s)")
                time.sleep(pause)

    # ---- the filesystem surface the loader uses ---------------------------------------------------------
    def exists(self, path: str) -> bool:
        """Whether `path` exists: True where its size and version are known or can be read (fsspec's http checks
        existence with a GET, which a server answers with the whole file: with a HEAD, no byte is sent twice); else
        fsspec's answer. fsspec's http answers False for any failed check (a 429, a 503) unless asked to be
        strict (fsspec 2024 and later), which raises them to be retried here; an older fsspec's answer is taken."""
        try:
            self._info(path)  # read once
            return True
        except Exception as exc:  # noqa: BLE001 - missing, a folder some stores cannot describe: fsspec's own check says
            if getattr(exc, "retried", False):
                raise  # the store kept failing: checking again would only repeat every retry
        check = getattr(self.fs, "_exists", None) or self.fs.exists
        strict = {"strict": True} if "strict" in inspect.signature(check).parameters else {}
        return self.call("checking", path, lambda: self.invoke("exists", path, **strict))

    def glob(self, pattern: str) -> list[str]:
        return self.call("listing", pattern, self.invoke, "glob", pattern)

    def size(self, path: str) -> int:
        return self._info(path)[0]

    def identity(self, path: str) -> tuple[int, str]:
        """(size, version tag) of `path` (`_info`): what names its contents in the caches on a local drive."""
        return self._info(path)

    def _info(self, path: str) -> tuple[int, str]:
        """(size, version tag) of `path`: the tag is what the store says changes with the content (HTTP's ETag or
        Last-Modified, S3's ETag, the Hub's blob id; '' where it says none), read once."""
        known = self._sizes.get(path)
        if known is None:
            info = self.call("sizing", path, self.invoke, "info", path)
            tag = next((str(info[k]) for k in VERSION_TAGS if info.get(k)), "")
            known = self._sizes[path] = (int(info["size"]), tag)
        return known

    def du(self, path: str) -> int:
        return int(self.call("sizing", path, self.invoke, "du", path))

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """The bytes [start, end) of `path`: from the disk tier where one is set and holds them, else fetched."""
        if self.disk is not None:
            return self.read_ranges([(path, start, end)])[0]
        return self._fetch_range(path, start, end)

    def _fetch_range(self, path: str, start: int, end: int) -> bytes:
        def fetch():
            if getattr(self.fs, "async_impl", False):
                data = self.invoke("cat_file", path, start=start, end=end)
            else:  # fsspec's generic cat_file reads through a read-ahead cache (5 MB more per request)
                with self._slot(), self.fs.open(path, "rb", cache_type="none") as f:
                    f.seek(start)
                    data = f.read(end - start)
            if len(data) != end - start:
                raise Truncated(f"got {len(data)} of {end - start} bytes")
            return data

        data = self.call(f"reading bytes {start}-{end - 1} of", path, fetch)
        with self.stats.lock:
            self.stats.bytes += len(data)
        return data

    def read_ranges(self, spans: list[tuple[str, int, int]]) -> list[bytes]:
        """The bytes of each (path, start, end) of `spans` (`fetch.spans`): on an asynchronous file system (http,
        s3, gcs) every first attempt at once, in one call on fsspec's event loop, so their latencies overlap; a span
        whose attempt failed or came back short is read again by `read_range` (retried by the policy, or its error
        named). Elsewhere one `read_range` after another. With a disk tier, each file's spans go through it: what
        the node's disk holds is read there, the rest fetched so and written."""
        if self.disk is None:
            return self._fetch_ranges(spans)
        out: list[bytes | None] = [None] * len(spans)
        by_path: dict[str, list[int]] = {}
        for i, (path, _, _) in enumerate(spans):
            by_path.setdefault(path, []).append(i)
        for path, order in by_path.items():
            size, tag = self._info(path)
            identity = f"{self._url(path)}\n{size}\n{tag}"
            got = self.disk.read_ranges(identity, size, [spans[i][1:] for i in order],
                                        lambda wanted, p=path: self._fetch_ranges([(p, a, b) for a, b in wanted]))
            for i, data in zip(order, got):
                out[i] = data
        return out  # type: ignore[return-value]

    def _fetch_ranges(self, spans: list[tuple[str, int, int]]) -> list[bytes]:
        """`read_ranges` from the remote itself."""
        if len(spans) < 2 or not (getattr(self.fs, "async_impl", False) and getattr(self.fs, "loop", None)):
            return [self._fetch_range(path, start, end) for path, start, end in spans]
        from fsspec.asyn import sync

        t0 = time.perf_counter()
        try:
            got = sync(self.fs.loop, _gather_ranges, self.fs._cat_file, spans, self.policy.timeout_s,
                       self._async_slots)
        except Exception as exc:  # noqa: BLE001 - the loop itself failed: every span is read again below
            got = [exc] * len(spans)
        with self.stats.lock:
            self.stats.requests += len(spans)
            self.stats.seconds += time.perf_counter() - t0
        out = []
        for (path, start, end), data in zip(spans, got):
            if isinstance(data, bytes) and len(data) == end - start:
                with self.stats.lock:
                    self.stats.bytes += len(data)
                out.append(data)
                continue
            why = f"got {len(data)} of {end - start} bytes" if isinstance(data, bytes) else \
                f"{type(data).__name__}: {redact(str(data))[:200]}"
            with self.stats.lock:
                self.stats.retries += 1
            log.warning("reading %s bytes %d-%d failed (%s), read again alone", redact(self._url(path)), start, end,
                        why)
            out.append(self._fetch_range(path, start, end))
        return out

    def open(self, path: str, mode: str = "rb", pieces=(), short_reads: bool = False) -> "RangeFile":
        """A RangeFile over `path`; `pieces` = (offset, bytes) already fetched, served without requests;
        `short_reads` for FFmpeg's demuxer alone (see RangeFile)."""
        if mode != "rb":
            raise ValueError(f"remote sources are read-only; mode {mode!r}")
        return RangeFile(self, path, self.size(path), pieces, short_reads=short_reads)


class RangeFile(io.RawIOBase):
    """Seekable read-only view of a remote file that serves reads from pieces of it already fetched.

    `preload(offset, data)` adds a piece the caller fetched in one request (an episode's packets, a row
    group). A read returns every byte asked for up to the end of the file, as a local file does (pyarrow treats
    a short read as a truncated file): it is assembled from the pieces that cover it, and the gaps between them
    are fetched, all of one read's gaps at once (`RemoteFS.read_ranges`), each exactly as far as the next piece
    begins. A gap that runs to the end of the read is fetched at least `min_read` bytes long (read-ahead for the
    small reads of demuxers and parquet readers), never into a piece already held, so a read inside preloaded
    pieces makes no request. Fetched gaps are kept among the last `keep` such pieces.

    `short_reads=True` ends a read at the end of the piece (or the fetched gap) it begins in instead, as a raw
    file may: only for FFmpeg's demuxer, which asks again for what it needs and no more, so checking a file's
    index with FFmpeg reads only the pieces indexing fetched (a whole read would pull the `mdat` bytes that
    follow the head). pyarrow takes a short read for a truncated file."""

    def __init__(self, rfs: RemoteFS, path: str, size: int, pieces=(), keep: int = 8, min_read: int = 1 << 16,
                 short_reads: bool = False) -> None:
        super().__init__()
        self.rfs, self.path, self.size, self.pos = rfs, path, size, 0
        self._fixed = [(int(o), bytes(b)) for o, b in pieces]
        self._extra: OrderedDict[int, bytes] = OrderedDict()
        self._keep, self._min_read, self._short_reads = keep, min_read, short_reads

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

    def preload(self, offset: int, data: bytes) -> None:
        self._extra[int(offset)] = data
        self._extra.move_to_end(int(offset))
        while len(self._extra) > self._keep:
            self._extra.popitem(last=False)

    def _piece(self, pos: int) -> tuple[int, bytes] | None:
        for offset, data in self._fixed:
            if offset <= pos < offset + len(data):
                return offset, data
        for offset, data in self._extra.items():
            if offset <= pos < offset + len(data):
                self._extra.move_to_end(offset)
                return offset, data
        return None

    def readinto(self, buffer) -> int:
        want = min(len(buffer), max(0, self.size - self.pos))
        if want == 0:
            return 0
        out = memoryview(buffer).cast("B")
        start, end = self.pos, self.pos + want
        gaps: list[tuple[int, int]] = []  # (start, end) of each stretch no piece covers
        pos = start
        while pos < end:
            hit = self._piece(pos)
            if hit is not None:
                offset, data = hit
                n = min(offset + len(data), end) - pos
                out[pos - start:pos - start + n] = data[pos - offset:pos - offset + n]
                pos += n
            else:
                stop = self._next_start(pos, end)
                gaps.append((pos, stop))
                pos = stop
            if self._short_reads:  # one piece, or one gap, a read
                end = pos
                break
        if gaps:
            spans = [(self.path, a, b) for a, b in gaps]
            a, b = gaps[-1]
            if b == end:  # read ahead past the end of the read, up to the next piece held or the file's end
                spans[-1] = (self.path, a, min(self.size, max(b, a + self._min_read), self._next_start(a, self.size)))
            for (a, b), data in zip(gaps, self.rfs.read_ranges(spans)):
                out[a - start:b - start] = data[:b - a]
                self.preload(a, data)
        self.pos = end
        return end - start

    def _next_start(self, pos: int, limit: int) -> int:
        """Where the first piece beginning after `pos` begins, or `limit` where none does before it."""
        starts = [o for o, _ in self._fixed] + list(self._extra)
        return min([limit] + [o for o in starts if pos < o < limit])

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            out = bytearray()
            while self.pos < self.size:
                out += self.read(self.size - self.pos)
            return bytes(out)
        buf = bytearray(max(0, min(size, self.size - self.pos)))
        n = self.readinto(buf)
        return bytes(buf[:n])
