"""Decoded frames kept for later epochs: decode once, train many epochs (`frame_cache_bytes`, `frame_cache_dir`).

A frame is named by its video file and the file time a sample asks for (the episode's `from_timestamp` plus the
frame's `timestamp`, whose nearest frame every route decodes): `(file, time in microseconds)` — an image stored in
the frame tables by its data file, its column and its row's (episode, frame) (`FrameCache.row_names`) — known from
the plan and the episode's table rows alone, so a batch whose frames are all held is built without fetching or
cutting its segments (and the store fetches nothing of an episode's camera whose frames are all held, nor the column
of a camera stored in the tables whose images are: `EpisodeHeld`). The
file's name is a digest of its path, size and modification time (its ETag or version where a remote store gives
no time), of how its frames are kept (`kept_as`: the route that decodes them, the sizes they are resized and
cropped to, their order) and of this module's `FORMAT`, so a video file rewritten in place, or frames decoded by
another route, are other names: a stale frame is never served.

Frames are the route's decoded pixels (a CPU route's: `Route.cached`; DALI's CPU decoder then runs on the workers,
`Resolved.dali_on_workers`; a depth camera's codes, (H, W) uint16), (H, W, 3) uint8 — or (3, H, W) for a small camera laid out channels-first on host frames
(`Resolved.kept_chw`: the batch's own order, so later epochs copy instead of transposing) — before anything the graph or
the caller does with them (dtype, normalisation, `augment`, `image_transforms`) — resized and cropped first where
`resize` or `crop` is set and the workers do it (`Resolved.shaped_on_workers`: DALI's own operators on the CPU, the
graph's pixels), else before resize and crop: a cached batch is the uncached batch of the same plan, bit for bit, and
augmentation stays random per epoch.

Where they are kept:
- in memory, up to `frame_cache_bytes`. A frame is admitted while there is room and never evicted: over a
  dataset larger than the bound, a least-recently-used cache hits at best bound/dataset under a global shuffle
  and not at all under a pool, whose epochs come back to an episode only after all the others
  (`benchmarks/frame_cache.py` measures both on the planner's own batches); keeping the first frames admitted
  hits bound/dataset under both, with no churn.
- past that bound, in `frame_cache_dir` (a local folder), one `.npy` file a frame, written once (a temporary
  file renamed: ranks of a node and later runs share the folder safely) and read back into an array of its own
  (a mapping's pages would count in the process's RSS for as long as it lived). The spill
  leaves the folder's file system at least `source.local_disk.SPILL_FREE` of its size free (and `SPILL_FREE_MIN_BYTES`): the
  checkpoints and logs a job writes to the same drive keep their room. `DALI_STREAM_SPILL_KEEP_FREE_BYTES` sets
  that floor instead (0 on a drive kept for the cache alone). A folder that cannot be written (full,
  read-only) or whose drive reached that floor stops being written to, with one warning; frames already there are
  still read, and the rest are decoded each epoch.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import warnings
from typing import Any, Callable, Hashable, Mapping

import numpy as np

from ..fetch.tables import FRAME_TIME_S
from ..source.local_disk import file_stamp, spill_floor, write_kept
from .route import Route

FORMAT = "dali-stream-frames-2"  # what a spilled frame is: bump when a frame's bytes or its name change
def _save(path: str, frame: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, np.ascontiguousarray(frame))


def micros(times_s: np.ndarray) -> np.ndarray:
    """File times in seconds as the whole microseconds a frame's name carries."""
    return np.rint(np.asarray(times_s, np.float64) * 1e6).astype(np.int64)


_SHAPE = re.compile(rb"'shape': \((\d+), (\d+)(?:, (\d+))?\)")
_DTYPES = {b"'|u1'": np.uint8, b"'<u2'": np.uint16}  # RGB pictures; a depth camera's 12-bit codes


def read_frame(path: str) -> np.ndarray | None:
    """The uint8 frame ((H, W, 3) or (3, H, W); a depth camera's (H, W) uint16 codes) `np.save` wrote to `path`,
    read into an array of its own; None where
    there is none or the file is not one (or is shorter than its header says). Its header is read here, not by
    `np.load`, which parses it with `ast.literal_eval`: CPython 3.11's parser keeps its recursion depth in shared state,
    and two builder threads loading at once raised `SystemError: AST constructor recursion depth mismatch`."""
    try:
        with open(path, "rb", buffering=0) as f:
            head = f.read(10)
            if len(head) < 10 or head[:6] != b"\x93NUMPY" or head[6] != 1:
                return None
            size = int.from_bytes(head[8:10], "little")
            header = f.read(size)
            shape = _SHAPE.search(header)
            dtype = next((t for descr, t in _DTYPES.items() if descr in header), None)
            if shape is None or dtype is None or b"'fortran_order': False" not in header:
                return None
            frame = np.empty(tuple(int(n) for n in shape.groups() if n is not None), dtype)
            if f.readinto(frame.data.cast("B")) != frame.nbytes:
                return None  # torn: shorter than its header says
            return frame
    except (OSError, ValueError):
        return None


def stamper(filesystems: list) -> Callable[[str], tuple]:
    """`file_stamp` on the first of `filesystems` (a mixture's members' data file systems) that holds the path."""
    def stamp(path: str) -> tuple:
        error: OSError | None = None
        for fs in filesystems:
            try:
                return file_stamp(fs, path)
            except OSError as exc:  # FileNotFoundError: another member's file system
                error = exc
        raise error or FileNotFoundError(path)
    return stamp


def kept_as(route: Route, shaped: str | None, chw: bool = False) -> str:
    """How a camera's frames are kept, part of their names: the route that decodes them (routes may convert to RGB
    differently), what the workers do to them first (`graph.resizer.Resizer.label`: resized, cropped), if any, and
    their order where it is (3, H, W) (`chw`, `Resolved.kept_chw`)."""
    return " ".join([route.name, *([shaped] if shaped is not None else []), *(["chw"] if chw else [])])


def frame_bytes(height: int, width: int, image_ops=None, depth: bool = False) -> int:
    """What one frame of a `height` x `width` camera takes as the cache keeps it: 3 x H x W uint8, at the size
    `image_ops` (`graph.imageops.ImageOps`) gives where the workers resize and crop first, else (None) as decoded; a
    depth camera's (`depth`) 12-bit codes in uint16, 2 x H x W at the recorded size."""
    if depth:
        return 2 * height * width
    h, w = image_ops.out_shape(height, width)[1:] if image_ops else (height, width)
    return 3 * h * w


def kept_bytes(catalog, keys, image_ops=None) -> int:
    """What every selected frame of the cameras `keys` of `catalog` (`meta.catalog.Catalog`) takes as the cache keeps
    it (`frame_bytes`), over every member that has them (video, or images stored in the tables)."""
    total = 0
    for m in catalog.members:
        for k in keys:
            own = m.own.get(k)
            if own is None:
                continue
            if own in m.meta.cameras:
                cam = m.camera(k)
                total += frame_bytes(cam.height, cam.width, image_ops, cam.depth is not None) * m.frames
            else:  # an image stored in the tables: the feature's shape
                h, w = catalog.fields[k].shape[:2]
                total += frame_bytes(h, w, image_ops) * m.frames
    return total


def room_warning(bound: int, decoded: int, ranks: int, available: int | None) -> str | None:
    """Why `frame_cache_bytes` may not fit this node: what a rank would keep (the bound, or the decoded frames of the
    cameras it caches where fewer) times the node's ranks, against the memory available when the loader starts
    (`loader.memory.available_bytes`); None where that fits in 90 % of it, or where it is not known."""
    keep = min(bound, decoded)
    if available is None or keep * ranks <= 0.9 * available:
        return None
    fits = int(0.8 * available / ranks)
    return (f"frame_cache_bytes={bound}: this rank may keep {keep / 2**30:.2f} GiB of decoded frames (the decoded "
            f"dataset takes {decoded / 2**30:.2f} GiB), x {ranks} rank(s) on this node = {keep * ranks / 2**30:.2f} "
            f"GiB, more than the {available / 2**30:.2f} GiB of memory available now: the job may be killed as the "
            f"cache fills. Set frame_cache_bytes to at most {fits} ({fits / 2**30:.2f} GiB) a rank, and "
            "frame_cache_dir to a local drive for the rest")


class FrameCache:
    """Decoded frames by (file, pts): `look` / `holds` / `put`, bounded in memory, spilled to a folder past the bound.

    `stamp(path)`: the file's identity (`file_stamp` on its file system), asked once per file. `labels`: camera key
    -> how its frames are kept (`kept_as`), for the cameras the cache serves."""

    def __init__(self, memory_bytes: int, folder: str | None, stamp: Callable[[str], tuple],
                 labels: Mapping[str, str]) -> None:
        self.memory_bytes = int(memory_bytes)
        self.labels = dict(labels)
        self._stamp = stamp
        self._lock = threading.Lock()
        self._frames: dict[Hashable, np.ndarray] = {}
        self._files: dict[tuple[str, str], str] = {}  # (path, route) -> their digest
        self.bytes = 0
        self.hits = 0  # frames served from memory
        self.disk_hits = 0  # frames served from the folder
        self.misses = 0
        self.spilled = 0  # frames written to the folder
        self.folder = None if folder is None else os.path.join(os.path.abspath(folder), FORMAT)
        self.spilling = self.folder is not None  # frames past the bound are written to the folder
        if self.folder is not None:
            spill_floor(0)  # a malformed floor is said by the constructor, not by the first spill
            try:
                os.makedirs(self.folder, exist_ok=True)
            except OSError as exc:
                self._stop_spilling(f"could not write decoded frames under {self.folder} ({exc})")

    def names(self, path: str, times_s: np.ndarray, label: str) -> list[tuple[str, int]]:
        """The names of the frames shown at file times `times_s` in the video file at `path`, kept as `label` says
        (`kept_as`)."""
        digest = self.digest(path, label)
        return [(digest, t) for t in micros(times_s).tolist()]

    def digest(self, path: str, label: str) -> str:
        """What names the video file at `path` kept as `label` in a frame's name: its path, size and modification
        time (ETag or version remote: `stamp`), so a rewritten file's frames are never read stale."""
        digest = self._files.get((path, label))
        if digest is None:
            text = repr((FORMAT, label, path, self._stamp(path)))
            digest = hashlib.sha1(text.encode()).hexdigest()[:20]
            with self._lock:
                self._files[(path, label)] = digest
        return digest

    def row_names(self, path: str, column: str, label: str, episode: int,
                  rows: np.ndarray) -> list[tuple[str, int]]:
        """The names of the images a camera stored in the frame tables keeps in column `column` of the data file at
        `path`, rows `rows` of episode `episode`, kept as `label` says: the data file's identity and the column (one
        data file holds every such camera's images), then the row's (episode, frame) in one number (an episode's
        frames are below 2**32)."""
        digest = self.digest(path, f"{label} column={column}")
        return [(digest, (episode << 32) | int(r)) for r in rows.tolist()]

    def _path(self, key: tuple[str, int]) -> str:
        return os.path.join(self.folder or "", key[0], f"{key[1]}.npy")

    def _load(self, key: tuple[str, int]) -> np.ndarray | None:
        """The spilled frame `key`, read from the folder; None if the folder has none (or a torn or foreign file)."""
        return None if self.folder is None else read_frame(self._path(key))

    def look(self, samples: list[list[tuple[str, int]] | None]) -> list[tuple[list, list] | None]:
        """Per sample (its frames' names, or None), the names and what is held under each (an array, or None)."""
        out: list[tuple[list, list] | None] = []
        hits = disk_hits = misses = 0
        for names in samples:
            if names is None:
                out.append(None)
                continue
            found = [self._frames.get(k) for k in names]
            for n, frame in enumerate(found):
                if frame is None:
                    found[n] = frame = self._load(names[n])
                    disk_hits += frame is not None
                    misses += frame is None
                else:
                    hits += 1
            out.append((names, found))
        with self._lock:
            self.hits, self.disk_hits, self.misses = self.hits + hits, self.disk_hits + disk_hits, self.misses + misses
        return out

    def holds(self, names: list[tuple[str, int]]) -> bool:
        """Whether every one of `names` is held (in memory, or in the folder)."""
        return all(k in self._frames or (self.folder is not None and os.path.exists(self._path(k))) for k in names)

    def put(self, keys: list[tuple[str, int]], frames: np.ndarray | list[np.ndarray]) -> None:
        """Keep `frames` ((N, H, W, 3) or (N, 3, H, W), or N arrays viewing one), frame n under `keys[n]`, in memory
        while there is room (as they are where all of them fit: nothing copied; copies of those that fit otherwise, so
        the rest is not held), the others in the folder."""
        with self._lock:
            first = {k: n for n, k in reversed(list(enumerate(keys)))}  # a name given twice (a window's padding): once
            room = sorted(n for k, n in first.items() if k not in self._frames)
            admitted = []
            for n in room:
                if self.bytes + frames[n].nbytes > self.memory_bytes:
                    break
                admitted.append(n)
                self.bytes += frames[n].nbytes
            whole = len(admitted) == len(first)
            for n in admitted:
                self._frames[keys[n]] = frames[n] if whole else np.array(frames[n], copy=True)
        for n in room[len(admitted):]:
            if not self.spilling:
                break
            self._spill(keys[n], frames[n])

    def _spill(self, key: tuple[str, int], frame: np.ndarray) -> None:
        path = self._path(key)
        if os.path.exists(path):
            return
        why = write_kept(path, frame.nbytes, lambda tmp: _save(tmp, frame), "decoded frames")
        if why is not None:
            self._stop_spilling(why)
            return
        with self._lock:
            self.spilled += 1

    def _stop_spilling(self, why: str) -> None:
        """No more frames written to the folder (those there are still read), said once."""
        with self._lock:
            was, self.spilling = self.spilling, False
        if was:
            warnings.warn(f"frame_cache_dir: {why}; decoded frames past frame_cache_bytes={self.memory_bytes} are no "
                          "longer written there (frames already there are still read, the rest decoded each epoch). "
                          "Free space there or point frame_cache_dir at a local folder with room for the decoded "
                          "dataset", stacklevel=3)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"held": self.bytes, "bound": self.memory_bytes, "frames": len(self._frames), "hits": self.hits,
                    "disk_hits": self.disk_hits, "misses": self.misses, "spilled": self.spilled,
                    "folder": self.folder, "spilling": self.spilling}


class EpisodeHeld:
    """What the decoded-frame cache `frames` holds of an episode, asked by the store before it fetches
    (`fetch.store.Held`). `catalog`: `meta.catalog.Catalog`; `routes`: camera key -> route."""

    def __init__(self, frames: FrameCache, catalog, routes: Mapping[str, Route]) -> None:
        self.frames, self.catalog = frames, catalog
        self._videos: dict[tuple[int, str], str] = {}  # (member, its camera) -> label
        self._stored: dict[int, list[tuple[str, str]]] = {}  # member -> (its column, label) of images in the tables
        for key, label in frames.labels.items():
            for m in catalog.members:
                own = catalog.fields[key].own[m.index]
                if own is None:
                    continue
                if routes[key].in_tables:
                    self._stored.setdefault(m.index, []).append((own, label))
                else:
                    self._videos[(m.index, own)] = label

    def camera(self, pos: int, camera: str, rows: dict) -> bool:
        """Whether every frame of the episode's video camera `camera` (the file times of all its `rows`) is held:
        the store then fetches none of its segment."""
        member, local = self.catalog.locate(pos)
        label = self._videos.get((member.index, camera))
        if label is None:
            return False
        start = float(member.meta.cameras[camera].from_timestamp[local])
        return self.frames.holds(self.frames.names(member.meta.video_file(local, camera), start + rows[FRAME_TIME_S],
                                                   label))

    def columns(self, pos: int) -> frozenset[str]:
        """The columns of the episode's cameras stored in the tables whose every row's image is held: its rows are
        read without them (the names need no rows: `FrameCache.row_names`)."""
        member, local = self.catalog.locate(pos)
        stored = self._stored.get(member.index)
        if not stored:
            return frozenset()
        path, episode = member.meta.data_file(local), member.meta.episode_index(local)
        every = np.arange(int(self.catalog.lengths[pos]))
        return frozenset(own for own, label in stored
                         if self.frames.holds(self.frames.row_names(path, own, label, episode, every)))
