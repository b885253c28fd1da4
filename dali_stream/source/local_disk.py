"""What the loader's caches on a local drive share: how a file's contents are named without reading them, and how
much room a cache leaves free on its drive (the decoded-frame spill, the decoded row groups)."""

from __future__ import annotations

import os
import shutil
import threading
from typing import Any, Callable

from .storage import is_local

SPILL_FREE = 0.05  # the share of a cache folder's file system a cache leaves free
SPILL_FREE_MIN_BYTES = 1 << 30  # and at least this many bytes
ENV_KEEP_FREE = "DALI_STREAM_SPILL_KEEP_FREE_BYTES"  # the floor in bytes, in place of the two above


def spill_floor(total_bytes: int) -> tuple[int, str]:
    """The bytes a cache leaves free on a drive of `total_bytes`, and how that floor was set (for its warning)."""
    raw = os.environ.get(ENV_KEEP_FREE)
    if raw is None:
        floor = max(int(SPILL_FREE * total_bytes), SPILL_FREE_MIN_BYTES)
        return floor, (f"{SPILL_FREE:.0%} of {total_bytes / 2**30:.0f} GiB, at least "
                       f"{SPILL_FREE_MIN_BYTES / 2**30:.0f} GiB; {ENV_KEEP_FREE} sets it")
    try:
        floor = int(raw)
    except ValueError:
        floor = -1
    if floor < 0:
        from ..errors import ConfigError

        raise ConfigError(f"{ENV_KEEP_FREE}={raw!r} is not a number of bytes >= 0; set it to e.g. {1 << 30} "
                          f"(1 GiB), or unset it for {SPILL_FREE:.0%} of the drive (at least 1 GiB)")
    return floor, f"{ENV_KEEP_FREE}={floor}"


def write_kept(path: str, nbytes: int, write: Callable[[str], None], what: str) -> str | None:
    """A cache's file at `path`, `nbytes` long, written by `write(tmp)` under a temporary name then renamed into place
    (no reader sees part of it), where its drive keeps `spill_floor` free after it. None when written; else why not,
    for the cache's one warning (`what`: what it keeps, e.g. "decoded frames")."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, exist_ok=True)
        disk = shutil.disk_usage(folder)
        floor, why = spill_floor(disk.total)
        if disk.free - nbytes < floor:
            return (f"its drive has {disk.free / 2**30:.1f} GiB free, and the cache leaves {floor / 2**30:.1f} GiB "
                    f"free ({why})")
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return f"could not write {what} under {folder} ({exc})"
    return None


def file_stamp(fs: Any, path: str) -> tuple:
    """What identifies the contents of `path` on `fs` without reading it: size and modification time locally; on a
    remote store the size and the version tag it reports (`remote.RemoteFS.identity`: HTTP's ETag or
    Last-Modified, S3's ETag, the Hub's blob id), or the marks of fsspec's `info` on a bare fsspec file system."""
    if is_local(fs):
        st = os.stat(path)
        return (st.st_size, st.st_mtime_ns)
    identity = getattr(fs, "identity", None)
    if identity is not None:
        return tuple(identity(path))
    info = fs.info(path)
    marks = [info.get(k) for k in ("mtime", "LastModified", "last_modified", "ETag", "etag", "version_id",
                                   "VersionId", "md5Hash", "blob_id", "lfs")]
    return (info.get("size"), *(str(m) for m in marks if m is not None))


ENV_CACHE = "DALI_STREAM_CACHE"  # dali_stream's folder in the user's cache, in place of the one below


def user_cache_dir() -> str | None:
    """dali_stream's folder in this user's cache: $DALI_STREAM_CACHE, else $XDG_CACHE_HOME/dali_stream, else
    ~/.cache/dali_stream (None where there is no home directory)."""
    given = os.environ.get(ENV_CACHE)
    if given:
        return given
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
        if home == "~" or not os.path.isdir(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "dali_stream")
