"""The node-local disk tier: remote bytes written once to a local folder, read from there on every later use.

A remote file is cut into blocks of `BLOCK` bytes (256 KiB); a range read asks for the blocks it spans. A block on
the disk is read from there (checked: its length and CRC-32); the rest are fetched from the remote (contiguous
blocks in one request, up to `RUN` blocks), written, then served. So the first read of any byte on a node fetches
it, and every later read in this run or the next, by any rank of the node, reads the disk.

- **Names**: a file's blocks live in a folder named by its identity, the remote path with the size and the version
  tag the store reports (HTTP's ETag or Last-Modified, S3's ETag, the Hub's blob id): a file replaced on the remote
  is a new name, fetched again; the old one ages out.
- **One fetch per block per node**: a rank claims a block before fetching it (a `.claim` file created exclusively,
  naming host and process); another rank that needs it waits for the block to appear. A claim whose process has
  died (same host: its pid is gone; another host: older than `STALE_S`) is taken over, so a killed rank never
  leaves a block unfetchable; the first time a process reads a file, it removes such dead claims from its folder
  (one left beside a block its rank wrote before it was killed would otherwise never be looked at again).
- **Never a partial block**: a block is written to a temporary name and renamed into place; one whose length or
  CRC-32 is wrong (a damaged disk, a file cut short by hand) is counted, deleted and fetched again, never served.
- **Bounded**: the bytes written are counted in one ledger shared by the node's ranks (`usage`, under `flock`); past
  `limit_bytes` the least recently read blocks (by mtime, set on every read) are deleted down to 90 % of it.
- **Degrades, never fails**: a folder that cannot be created or written (read-only, full, no permission) turns
  writing off with one warning; reads go to the remote as without the tier (blocks already there are still read).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import socket
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger("dali_stream")

BLOCK = 1 << 18  # bytes a block: over-fetch at each end of a range is under one block
RUN = 64  # most blocks fetched in one request (16 MiB)
STALE_S = 600.0  # a claim from another host older than this is taken over
WAIT_S = 0.01  # first pause while another rank fetches a block (doubling to 0.2 s)
TRAILER = struct.Struct("<QI")  # a block's length and CRC-32, after its bytes
LAYOUT = "v1"  # folder of this layout under the tier's root: a changed layout starts afresh beside it

Fetch = Callable[[list[tuple[int, int]]], list[bytes]]


@dataclass
class DiskStats:
    """What the tier did, in bytes and blocks: read from disk, fetched and written, waited for another rank, found
    damaged, evicted."""

    bytes_read: int = 0
    blocks_read: int = 0
    bytes_written: int = 0
    blocks_fetched: int = 0
    blocks_waited: int = 0
    damaged: int = 0
    bytes_evicted: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self) -> dict:
        return {f"disk_{k}": v for k, v in vars(self).items() if k != "lock"}

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)


class DiskTier:
    """Blocks of remote files on a node-local folder `root`, at most `limit_bytes` of them (None: what the folder
    holds and 80 % of its drive's free space when the tier is made; module docstring)."""

    def __reduce__(self) -> tuple:
        """Pickled (a spawned DataLoader worker's metadata): the same folder and bounds, counters of its own."""
        return DiskTier, self._given

    def __init__(self, root: str, limit_bytes: int | None = None, block_bytes: int = BLOCK) -> None:
        self._given = (str(root), limit_bytes, block_bytes)  # what `__reduce__` makes it again from
        self.root = os.path.join(os.path.abspath(os.path.expanduser(str(root))), LAYOUT)
        self.block = int(block_bytes)
        self.stats = DiskStats()
        self.host = socket.gethostname()
        self.writable = True
        self._warned = False
        self._swept: set[str] = set()  # file folders whose dead claims this process has removed
        self.limit_bytes = 0 if limit_bytes is None else int(limit_bytes)
        try:
            os.makedirs(self.root, exist_ok=True)
            probe = os.path.join(self.root, f".probe.{os.getpid()}.{threading.get_ident()}")
            with open(probe, "wb") as fh:
                fh.write(b"0")
            os.unlink(probe)
            if limit_bytes is None:  # what it holds already, and 80 % of what is free
                self.limit_bytes = self._account(0) + int(0.8 * shutil.disk_usage(self.root).free)
        except OSError as exc:
            self._stop_writing(exc)

    # ---- reading ------------------------------------------------------------------------------------------------
    def read_ranges(self, identity: str, size: int, spans: list[tuple[int, int]], fetch: Fetch) -> list[bytes]:
        """The bytes of each (start, end) of `spans` of the file named by `identity` (`size` bytes long); `fetch`
        reads (start, end) spans from the remote, all at once."""
        folder = os.path.join(self.root, hashlib.sha256(identity.encode()).hexdigest()[:32])
        if folder not in self._swept:
            self._sweep(folder)
        wanted = sorted({b for start, end in spans for b in self._blocks(start, end)})
        blocks = {b: data for b in wanted if (data := self._load(folder, b, size)) is not None}
        missing = [b for b in wanted if b not in blocks]
        if missing:
            blocks.update(self._obtain(folder, identity, size, missing, fetch))
        out = []
        for start, end in spans:
            skip = start % self.block
            out.append(b"".join(blocks[b] for b in self._blocks(start, end))[skip:skip + end - start])
        return out

    def _blocks(self, start: int, end: int) -> range:
        """The blocks [start, end) spans (none where it is empty)."""
        return range(start // self.block, (end - 1) // self.block + 1) if end > start else range(0)

    def _length(self, b: int, size: int) -> int:
        return max(0, min(self.block, size - b * self.block))

    def _load(self, folder: str, b: int, size: int) -> bytes | None:
        path = os.path.join(folder, f"{b}.blk")
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except OSError:
            return None
        n = self._length(b, size)
        if len(raw) == n + TRAILER.size:
            length, crc = TRAILER.unpack_from(raw, n)
            data = raw[:n]
            if length == n and zlib.crc32(data) == crc:
                try:
                    os.utime(path)  # least recently read goes first
                except OSError:
                    pass
                self.stats.add(bytes_read=n, blocks_read=1)
                return data
        self.stats.add(damaged=1)
        log.warning("disk tier: block %s of %s is damaged (%d bytes, expected %d with its check): deleted and "
                    "fetched again", b, folder, len(raw), n + TRAILER.size)
        _unlink(path)
        return None

    # ---- fetching, once a node ----------------------------------------------------------------------------------
    def _obtain(self, folder: str, identity: str, size: int, missing: list[int], fetch: Fetch) -> dict[int, bytes]:
        got: dict[int, bytes] = {}
        if not self.writable or not self._folder(folder, identity):
            return self._fetch(missing, size, fetch)
        pending = list(missing)
        pause, since = WAIT_S, time.monotonic()
        while pending:
            mine = [b for b in pending if self._claim(folder, b)]
            if mine:
                try:
                    fetched = self._fetch(mine, size, fetch)
                    for b, data in fetched.items():
                        self._store(folder, b, data)
                    got.update(fetched)
                finally:
                    for b in mine:
                        self._release(folder, b)
            waiting = [b for b in pending if b not in got]
            pending = []
            for b in waiting:  # claimed by another process or thread: theirs once it is on the disk
                held = self._load(folder, b, size)
                if held is not None:
                    got[b] = held
                    self.stats.add(blocks_waited=1)
                else:
                    pending.append(b)
            if pending and (not self.writable or time.monotonic() - since > STALE_S):
                got.update(self._fetch(pending, size, fetch))  # writing stopped, or a holder alive but stuck
                break
            if pending:
                time.sleep(pause)
                pause = min(0.2, pause * 2)
        return got

    def _fetch(self, blocks: list[int], size: int, fetch: Fetch) -> dict[int, bytes]:
        """Remote reads of `blocks`: contiguous ones in one request, at most RUN blocks each."""
        runs: list[list[int]] = []
        for b in sorted(blocks):
            if runs and b == runs[-1][-1] + 1 and len(runs[-1]) < RUN:
                runs[-1].append(b)
            else:
                runs.append([b])
        spans = [(run[0] * self.block, min(size, (run[-1] + 1) * self.block)) for run in runs]
        out: dict[int, bytes] = {}
        for run, data in zip(runs, fetch(spans)):
            for i, b in enumerate(run):
                out[b] = data[i * self.block:(i + 1) * self.block]
        self.stats.add(blocks_fetched=len(blocks))
        return out

    def _folder(self, folder: str, identity: str) -> bool:
        """Whether the file's folder exists or was made (with `identity` written in it, for people)."""
        if os.path.isdir(folder):
            return True
        try:
            os.makedirs(folder, exist_ok=True)
            self._write_atomic(os.path.join(folder, "identity"), identity.encode())
            return True
        except OSError as exc:
            self._stop_writing(exc)
            return False

    def _claim(self, folder: str, b: int) -> bool:
        """Whether this process now holds block `b`'s claim (taking over one whose holder died)."""
        path = os.path.join(folder, f"{b}.claim")
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._stale(path):
                    return False
                _unlink(path)  # its holder died: take it over (a race with another taker is settled by O_EXCL)
                continue
            except OSError as exc:
                self._stop_writing(exc)
                return False
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{self.host}\n{os.getpid()}\n")
            if os.path.exists(os.path.join(folder, f"{b}.blk")):  # written between our look and our claim
                self._release(folder, b)
                return False
            return True
        return False

    def _stale(self, path: str) -> bool:
        try:
            with open(path) as fh:
                host, pid = (fh.read().split("\n") + ["", ""])[:2]
            age = time.time() - os.stat(path).st_mtime
        except (OSError, ValueError):
            return False  # gone already, or being written: look again
        if host == self.host and pid.isdigit():
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                return True
            except PermissionError:  # alive, another user's
                pass
            return False
        return age > STALE_S or (not pid and age > 5.0)  # another host's, or an empty claim left by a crash

    def _sweep(self, folder: str) -> None:
        """Remove the claims in `folder` whose holders died (`_stale`), once a process: a rank killed between
        writing a block and releasing its claim leaves one beside the block, which no fetch then asks about."""
        self._swept.add(folder)
        try:
            names = os.listdir(folder)
        except OSError:
            return
        for name in names:
            if name.endswith(".claim") and self._stale(os.path.join(folder, name)):
                _unlink(os.path.join(folder, name))

    def _release(self, folder: str, b: int) -> None:
        _unlink(os.path.join(folder, f"{b}.claim"))

    # ---- writing and the bound ----------------------------------------------------------------------------------
    def _store(self, folder: str, b: int, data: bytes) -> None:
        try:
            self._write_atomic(os.path.join(folder, f"{b}.blk"), data + TRAILER.pack(len(data), zlib.crc32(data)))
        except OSError as exc:
            self._stop_writing(exc)
            return
        self.stats.add(bytes_written=len(data))
        if self._account(len(data) + TRAILER.size) > self.limit_bytes:
            self._evict()

    def _write_atomic(self, path: str, payload: bytes) -> None:
        tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(payload)
            os.replace(tmp, path)
        except OSError:
            _unlink(tmp)
            raise

    def _account(self, delta: int, reset: int | None = None) -> int:
        """The ledger's bytes after adding `delta` (or set to `reset`), under an exclusive lock of the node's ranks."""
        import fcntl

        path = os.path.join(self.root, "usage")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 8, 0)
            total = struct.unpack("<q", raw)[0] if len(raw) == 8 else 0
            total = reset if reset is not None else max(0, total + delta)
            os.pwrite(fd, struct.pack("<q", total), 0)
            return total
        finally:
            os.close(fd)

    def _evict(self) -> None:
        """Delete the least recently read blocks down to 90 % of the bound (one rank at a time), and count again."""
        import fcntl

        fd = os.open(os.path.join(self.root, "evicting"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another rank is at it
            blocks, total = [], 0
            for entry in os.scandir(self.root):
                if not entry.is_dir():
                    continue
                for item in os.scandir(entry.path):
                    try:
                        st = item.stat()
                    except OSError:
                        continue
                    if item.name.endswith(".blk"):
                        blocks.append((st.st_mtime, st.st_size, item.path))
                        total += st.st_size
                    elif ".tmp." in item.name and time.time() - st.st_mtime > STALE_S:
                        _unlink(item.path)  # left by a process killed while writing
            freed = 0
            for _, n, path in sorted(blocks):
                if total - freed <= 0.9 * self.limit_bytes:
                    break
                if _unlink(path):
                    freed += n
            self._account(0, reset=total - freed)
            self.stats.add(bytes_evicted=freed)
        finally:
            os.close(fd)

    def _stop_writing(self, exc: OSError) -> None:
        self.writable = False
        if not self._warned:
            self._warned = True
            why = {errno.ENOSPC: "the drive is full", errno.EROFS: "the drive is read-only",
                   errno.EACCES: "no permission", errno.EDQUOT: "over the disk quota"}.get(exc.errno or 0, str(exc))
            log.warning("disk tier %s cannot be written (%s): remote bytes are read from the remote from now on, not "
                        "kept; free space or give disk_cache_dir a writable local folder", self.root, why)


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
