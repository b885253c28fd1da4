"""Encoded images of open episodes kept on a local drive instead of in memory, where the episode cache is full.

A camera stored as images in the frame tables (lerobot's `use_videos=False`) has its encoded images in the episode's
rows, and an open episode's rows stay in the episode cache until its last frame is drawn: under a global shuffle
that is nearly every episode of the rank all epoch, so the rank's share of the dataset's images (gigabytes for
LIBERO's) would stay in memory past `cache_bytes`. Parquet cannot read one row's image alone (a page holds many, and
lerobot's files have no page index), so once the cache holds `cache_bytes`, the store writes each newly fetched
episode's image columns here and keeps their offsets: a sample's image is read back with one `pread` (the page
cache's, where the drive's pages are still cached), on the worker decoding it.

- **Files**: appended to in turn (`FILE_BYTES` each), each unlinked as soon as it is created, so nothing is left
  behind when the process ends, killed or not; a file's space goes back when the last episode whose images it holds
  leaves the episode cache (its `SpilledImages` collected).
- **Floor**: a write that would leave its drive less free than `source.local_disk.spill_floor` is not made; nor is
  one that fails (read-only, full, over quota): the images stay in memory, with one warning naming the folder.

Images of a row group mapped from the table cache are views of the mapping already (`fetch.mapped_images`): never
written here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import warnings

import numpy as np

from ..errors import DatasetError
from ..source.local_disk import spill_floor

FOLDER = "image-spill"  # under the loader's table cache folder
FILE_BYTES = 256 << 20  # a spill file is appended to until it holds this much, then the next one is begun
IOV_MAX = 1024  # buffers one pwritev takes (Linux's limit)


def _write_all(fd: int, blobs: list[bytes], at: int) -> None:
    """`blobs` written one after another from offset `at` (pwritev, IOV_MAX buffers a call, short writes resumed)."""
    for first in range(0, len(blobs), IOV_MAX):
        views = [memoryview(b) for b in blobs[first:first + IOV_MAX] if len(b)]
        while views:
            done = os.pwritev(fd, views, at)
            if done <= 0:
                raise OSError(f"the drive took no bytes at offset {at}")
            at += done
            while views and done >= len(views[0]):
                done -= len(views[0])
                views.pop(0)
            if views and done:
                views[0] = views[0][done:]


class _File:
    """One unlinked spill file, open for reading and appending; closed once no `SpilledImages` refers to it."""

    def __init__(self, folder: str) -> None:
        fd, path = tempfile.mkstemp(prefix="images-", suffix=".bin", dir=folder)
        os.unlink(path)  # the descriptor keeps it: nothing outlives the process
        self.fd, self.size, self.folder = fd, 0, folder

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


class SpilledImages:
    """An image column of an episode's rows, on the drive: `column[i]` the `i`-th row's encoded image (`bytes`), as
    the object array it replaces gives it. `nbytes`: what it holds in memory (its offsets)."""

    def __init__(self, file: _File, offsets: np.ndarray, where: str) -> None:
        self.file, self.offsets = file, offsets  # len + 1 offsets: row i is [offsets[i], offsets[i + 1])
        self.where, self.folder = where, file.folder

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> bytes:
        start, stop = int(self.offsets[i]), int(self.offsets[i + 1])
        try:
            got = os.pread(self.file.fd, stop - start, start)
            if len(got) != stop - start:
                raise OSError(f"{len(got)} bytes of {stop - start} came back")
        except OSError as exc:
            raise DatasetError(f"{self.where}, row {i}: its image, kept on the drive under {self.folder} while the "
                               f"episode is open (the episode cache was full), could not be read back ({exc}); "
                               "check that drive, or set table_cache_dir to another local folder ('off' keeps "
                               "such images in memory)") from exc
        return got

    @property
    def nbytes(self) -> int:
        return int(self.offsets.nbytes)


class ImageSpill:
    """`keep(column, where)`: an image column (an object array of `bytes`) written to a spill file under `folder`, as
    a `SpilledImages` (`where`: its episode and camera, for its errors); or the column itself where it cannot be
    written there (one warning). Counters: `written_bytes`, `columns`."""

    def __init__(self, folder: str) -> None:
        self.folder = os.path.join(os.path.abspath(folder), FOLDER)
        self._lock = threading.Lock()
        self._file: _File | None = None
        self._failed: str | None = None
        self.written_bytes = 0
        self.columns = 0

    def rows(self, rows: dict, image_keys: list[str], where: str) -> dict:
        """An episode's rows with their columns of `image_keys` kept here (`keep`); `where` names the episode."""
        images = [k for k in image_keys if isinstance(rows.get(k), np.ndarray)]
        return {**rows, **{k: self.keep(rows[k], f"{where}, camera {k!r}") for k in images}} if images else rows

    def keep(self, column: np.ndarray, where: str = "an episode"):
        if self._failed is not None or not len(column):
            return column
        blobs = [b if isinstance(b, bytes) else bytes(b or b"") for b in column.tolist()]
        sizes = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
        total = int(sizes.sum())
        with self._lock:
            try:
                why = self._room(total)
                if why is None:
                    if self._file is None or self._file.size + total > FILE_BYTES:
                        self._file = _File(self.folder)
                    file = self._file
                    offsets = np.empty(len(blobs) + 1, dtype=np.int64)
                    offsets[0] = file.size
                    np.cumsum(sizes, out=offsets[1:])
                    offsets[1:] += file.size
                    _write_all(file.fd, blobs, file.size)
                    file.size += total
            except OSError as exc:
                why = f"could not write under {self.folder} ({exc})"
            if why is not None:
                self._failed = why
            else:
                self.written_bytes += total
                self.columns += 1
                return SpilledImages(file, offsets, where)
        warnings.warn(f"the episode cache is full and the encoded images of open episodes cannot be kept on the "
                      f"drive: {why}. They stay in memory (past cache_bytes) until their episodes close; free space "
                      "there, or set table_cache_dir to a folder on a local drive with room", stacklevel=3)
        return column

    def _room(self, nbytes: int) -> str | None:
        """(lock held) Why `nbytes` more cannot be written to the folder's drive, or None."""
        os.makedirs(self.folder, exist_ok=True)
        disk = shutil.disk_usage(self.folder)
        floor, why = spill_floor(disk.total)
        if disk.free - nbytes < floor:
            return (f"its drive ({self.folder}) has {disk.free / 2**30:.1f} GiB free, and the spill leaves "
                    f"{floor / 2**30:.1f} GiB free ({why})")
        return None


def held_images_said(images: dict[str, int], global_shuffle: bool, spilling: bool) -> str:
    """What the episode cache's warning (pinned episodes past `cache_bytes`) adds where they hold images stored in the
    tables (`images`: bytes by camera): how much, why, and what to do."""
    if not images:
        return ""
    said = (f". {sum(images.values()) / 2**20:.1f} MiB of it are the encoded images of cameras {sorted(images)} "
            "stored in the frame tables, which an episode holds whole while it is open")
    if global_shuffle:  # an episode is open from its first frame drawn to its last
        said += (" (under a global shuffle, nearly all of the rank's episodes all epoch: its share of the "
                 "dataset's images in memory); a pool (episode_pool_size=16) holds the pool's alone, and "
                 "frame_cache_bytes keeps later epochs from reading them")
    if not spilling:
        said += ("; with table_cache_dir on a local drive (it is off) the images of episodes fetched past "
                 "cache_bytes are kept there instead")
    return said + ("; lerobot-edit-dataset --operation.type convert_image_to_video makes the dataset videos, "
                   "which are read one sample's frames at a time")
