"""The fetched working set: each open episode's table rows and per-camera segments, fetched once.

Entries are fetched on first use by whichever thread asks first (others wait for that fetch), kept in
least-recently-used order and evicted beyond `capacity_episodes` episodes. The pool bounds what is in
use, so eviction only drops episodes the plan has finished with, unless the capacity is set below it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from .segments import Segment, cut_segment
from .tables import TableReader


@dataclass
class StoreStats:
    segments_cut: int = 0
    segment_bytes: int = 0
    table_reads: int = 0
    hits: int = 0
    evictions: int = 0
    fetch_s: float = 0.0
    episodes: set = field(default_factory=set)  # positions whose rows or segments were fetched


@dataclass
class _Entry:
    ready: threading.Event = field(default_factory=threading.Event)
    value: object = None
    error: BaseException | None = None


class EpisodeStore:
    def __init__(self, meta, tables: TableReader, tolerance_s: float, capacity_episodes: int) -> None:
        self.meta = meta
        self.tables = tables
        self.tolerance_s = tolerance_s
        self.capacity = max(1, capacity_episodes)
        self.stats = StoreStats()
        self._lock = threading.Lock()
        self._episodes: OrderedDict[int, dict[object, _Entry]] = OrderedDict()

    def _get(self, pos: int, key: object, make: Callable[[], object]):
        with self._lock:
            slots = self._episodes.get(pos)
            if slots is None:
                slots = self._episodes[pos] = {}
            self._episodes.move_to_end(pos)
            entry = slots.get(key)
            owner = entry is None
            if owner:
                entry = slots[key] = _Entry()
            else:
                self.stats.hits += 1
        if owner:
            import time

            t0 = time.perf_counter()
            try:
                entry.value = make()
            except BaseException as exc:
                entry.error = exc
                with self._lock:
                    self._episodes.get(pos, {}).pop(key, None)
            finally:
                entry.ready.set()
                with self._lock:
                    self.stats.fetch_s += time.perf_counter() - t0
                    self._evict()
        else:
            entry.ready.wait()
        if entry.error is not None:
            raise entry.error
        return entry.value

    def _evict(self) -> None:
        while len(self._episodes) > self.capacity:
            self._episodes.popitem(last=False)
            self.stats.evictions += 1

    def rows(self, pos: int) -> dict:
        def make():
            out = self.tables.episode(pos)
            self.stats.table_reads += 1
            self.stats.episodes.add(pos)
            return out

        return self._get(pos, "rows", make)

    def segment(self, pos: int, camera: str) -> Segment:
        def make():
            meta, cam = self.meta, self.meta.cameras[camera]
            start = float(cam.from_timestamp[pos])
            last = start + float(self.rows(pos)["timestamp"][-1])
            seg = cut_segment(meta.data_fs, meta.video_file(pos, camera), start, float(cam.to_timestamp[pos]),
                              episode=meta.episode_index(pos), camera=camera, codec=cam.codec,
                              tolerance_s=self.tolerance_s, last_frame_s=last)
            self.stats.segments_cut += 1
            self.stats.segment_bytes += seg.nbytes
            self.stats.episodes.add(pos)
            return seg

        return self._get(pos, ("segment", camera), make)
