"""Parquet row groups that hold many episodes, decoded once a node and kept on a local drive, read memory-mapped.

Parquet cannot read part of a row group. lerobot's recorder writes one row group per episode, but its dataset tools
(lerobot-edit-dataset's delete_episodes, split, remove_feature, modify_tasks; the v2.1 to v3.0 converter) write each
data file as one group (pandas' default: up to 1,048,576 rows), so every episode read would decode its file's whole
group (an 83 MB file: 0.6-1.5 s on this project's 2-core machine) and, from a remote store, fetch all of it. Such a
group is decoded once and written to `folder` as an Arrow IPC file; later reads map it and slice the episode's rows
out (no decode, no fetch), in this process, in every rank of the node and in later runs.

- **Names**: a group's file lives in a folder named by a hash of its data file's path, and is named by a hash of
  that file's identity (size and modification time locally, size and version tag remotely:
  `source.local_disk.file_stamp`), then of the group and the columns: a data file replaced under the folder is a new
  name, never stale.
- **Files of replaced data files go**: the first time a process writes a group of a data file, it deletes the files
  its folder holds for other identities of that data file (a process still reading one keeps its mapping), and
  temporary files older than `STALE_TMP_S` (a writer killed mid-write).
- **A bound, where set** (`table_cache_bytes`): after each group it writes, a process deletes the least recently
  read groups of the whole folder (every data file's, by modification time: a group mapped from the folder is
  touched) until they take no more than the bound, never the one just written, and forgets its own mapping of
  them. Rows still slicing a deleted group keep it readable (its space comes back when they go); a process that
  looks for it next decodes it again.
- **One decode a node**: a process decoding a group holds an exclusive `flock` on its `.lock` file; another process
  (or thread) wanting the group waits on it, then maps what the first wrote.
- **Never a partial file**: written under a temporary name and renamed; a file that does not open as the group (an
  Arrow error, other rows or columns) is deleted and made again.
- **Degrades, never fails**: where the folder cannot be written (read-only, full, over quota) or its drive would
  keep less free than `source.local_disk.spill_floor`, one warning, and groups are kept in memory (the last `memory`
  of them, decoded again when they come back) as without a folder.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import warnings
from typing import Callable

from ..source.local_disk import write_kept
from .once import OncePerKey

LAYOUT = "tables-v2"  # folder of this layout under the cache's root: a changed layout starts afresh beside it
STALE_TMP_S = 3600.0  # a temporary file this old is a killed writer's
MAPPED = 64  # groups kept mapped per reader (their pages are the system's page cache, shared by the node)


class _NotWritten(Exception):
    """A group decoded but not kept in the folder: the caller keeps it in memory."""

    def __init__(self, table) -> None:
        super().__init__("not written")
        self.table = table


def _digest(value) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:40]


def _drop(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class DecodedGroups:
    """`get(name, rows, columns, make)`: the decoded row group `make()` reads, made once per node where `folder`
    is set (module doc), else kept among the last `memory` groups in memory; and whether it is mapped from the
    folder. Counters: `decoded` (groups this process decoded), `disk_hits` (groups mapped from files another process
    or run wrote), `written_bytes`."""

    def __init__(self, folder: str | None, memory: int = 2, bound: int | None = None) -> None:
        self.folder = None if folder is None else os.path.join(os.path.abspath(folder), LAYOUT)
        self.bound = bound  # bytes of groups the folder keeps at most (None: the drive's floor alone)
        self.evicted = 0  # groups deleted to keep within it
        self.writing = self.folder is not None
        self.memory: OncePerKey = OncePerKey(memory)  # decoded groups not kept in the folder
        self.mapped: OncePerKey = OncePerKey(MAPPED)  # groups mapped from the folder
        self._lock = threading.Lock()
        self.decoded = 0
        self.disk_hits = 0
        self.damaged = 0
        self.written_bytes = 0
        self.swept = 0  # files of replaced data files (and killed writers' temporary files) deleted
        self._swept: set[str] = set()

    def get(self, path: str, stamp: tuple, part: tuple, rows: int, columns: list[str], make: Callable[[], object]):
        """(row group `part` (the group and the columns) of data file `path` whose identity is `stamp`, whether that
        table is mapped from the folder: its buffers the file's pages, not this process's memory)."""
        where, what = _digest(path), _digest((stamp,))[:16] + "-" + _digest(part)[:24]
        key = f"{where}/{what}"
        if self.folder is None or self.memory.holds(key):
            return self.memory.get(key, lambda: self._decode(make)), False
        try:
            return self.mapped.get(key, lambda: self._kept(key, rows, columns, make)), True
        except _NotWritten as kept:
            table = kept.table
            return self.memory.get(key, lambda: table), False

    def _decode(self, make):
        table = make()
        with self._lock:
            self.decoded += 1
        return table

    def _path(self, key: str) -> str:
        where, what = key.split("/")
        return os.path.join(self.folder or "", where[:2], where, f"{what}.arrow")

    @staticmethod
    def _key(path: str) -> str:
        """The key whose file `_path` gives is `path`."""
        return f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path).removesuffix('.arrow')}"

    def _sweep(self, path: str) -> None:
        """Delete, from the folder of `path`'s data file, the files of its other identities and the temporary files
        of killed writers; once a data file a process."""
        folder, name = os.path.split(path)
        with self._lock:
            if folder in self._swept:
                return
            self._swept.add(folder)
        current = name.split("-")[0] + "-"
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        now = time.time()
        for entry in entries:
            try:
                if entry.name.endswith(".tmp"):
                    stale = now - entry.stat().st_mtime > STALE_TMP_S
                else:
                    stale = not entry.name.startswith(current)
            except OSError:
                continue
            if stale:
                _drop(entry.path)
                with self._lock:
                    self.swept += 1

    def _mapped(self, path: str, rows: int, columns: list[str]):
        """The group in `path`, mapped; None where there is none, or one that is not the group (deleted)."""
        import pyarrow as pa

        try:
            table = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException):
            table = None
        if table is None or table.num_rows != rows or not set(columns) <= set(table.column_names):
            with self._lock:
                self.damaged += 1
            _drop(path)
            return None
        return table

    def _found(self, path: str, rows: int, columns: list[str]):
        """The group another process or run wrote to `path`, mapped (counted), or None."""
        table = self._mapped(path, rows, columns)
        if table is not None:
            with self._lock:
                self.disk_hits += 1
            if self.bound is not None:
                try:
                    os.utime(path)  # read now: the last the bound deletes
                except OSError:
                    pass
        return table

    def _kept(self, key: str, rows: int, columns: list[str], make):
        path = self._path(key)
        table = self._found(path, rows, columns)
        if table is not None:
            return table
        if not self.writing:
            raise _NotWritten(self._decode(make))
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(f"{path}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as exc:
            self._stop(f"could not write under {self.folder} ({exc})")
            raise _NotWritten(self._decode(make)) from None
        import fcntl

        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:  # a file system without locks (an NFS mount without lockd): written unlocked, renamed whole
                pass
            table = self._found(path, rows, columns)  # written by the process this one waited for
            if table is not None:
                return table
            decoded = self._decode(make)
            self._sweep(path)
            table = self._mapped(path, rows, columns) if self._write(path, decoded) else None
            if table is None:  # not written, or what was written does not map back: kept in memory
                raise _NotWritten(decoded)
            return table
        finally:
            os.close(fd)  # releases the lock

    def _write(self, path: str, table) -> bool:
        import pyarrow as pa

        def write(tmp: str) -> None:
            one = table.combine_chunks() if any(col.num_chunks > 1 for col in table.columns) else table
            with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, one.schema) as writer:
                writer.write_table(one)

        why = write_kept(path, table.nbytes, write, "decoded row groups")
        if why is not None:
            self._stop(why)
            return False
        with self._lock:
            self.written_bytes += os.path.getsize(path)
        if self.bound is not None:
            self._keep_within(path)
        return True

    def _keep_within(self, written: str) -> None:
        """Delete the least recently read groups of the folder (not `written`) until they take at most `bound`."""
        groups = []
        for top, _, names in os.walk(self.folder or ""):
            for name in names:
                if name.endswith(".arrow"):
                    try:
                        st = os.stat(os.path.join(top, name))
                    except OSError:
                        continue
                    groups.append((st.st_mtime_ns, st.st_size, os.path.join(top, name)))
        total = sum(size for _, size, _ in groups)
        for _, size, path in sorted(groups):
            if total <= (self.bound or 0):
                break
            if path != written:
                _drop(path)
                # this process's mapping too: the drive gets the space back once no rows slice it any more
                self.mapped.forget(self._key(path))
                total -= size
                with self._lock:
                    self.evicted += 1

    def _stop(self, why: str) -> None:
        """No more groups written to the folder (those there are still read), said once."""
        with self._lock:
            was, self.writing = self.writing, False
        if was:
            warnings.warn(
                f"table_cache_dir: {why}; parquet row groups holding many episodes are no longer kept there: the last "
                f"{self.memory.capacity} stay in memory and the others are decoded again (from a remote dataset: "
                "fetched again) whenever one of their episodes is read. Free space there, or point table_cache_dir at "
                "a local folder with room for the dataset's decoded tables", stacklevel=3)

    def stats(self) -> dict:
        return {"folder": self.folder, "writing": self.writing, "decoded": self.decoded, "disk_hits": self.disk_hits,
                "damaged": self.damaged, "written_bytes": self.written_bytes, "swept": self.swept,
                "bytes_bound": self.bound, "evicted": self.evicted,
                "mapped": len(self.mapped), "in_memory": len(self.memory)}
