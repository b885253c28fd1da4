"""The fetched working set: each open episode's table rows and per-camera segments, fetched once.

A camera whose episode would take more than `segment_bytes_limit` (an hour-long recording) is not fetched: each
sample asks `segment_for` and gets a piece cut for its frames alone (`fetch.pieces`, cut ahead on threads of their
own). The threads that close a collected loader's stages are `fetch.closer`'s.

An episode is fetched whole (rows, and a segment per camera, in parallel) by the background fetch threads after
`pin` (when the plan admits it), or by a builder that finds it missing (`demand_fetches`); others wait for that
fetch (its parts, threads and claims: `fetch.episode_fetch`). Entries are bounded in bytes (`capacity_bytes`,
segments plus rows) and refcounted: `unpin` (retired, every batch drawing it built) makes an entry evictable, least
recently used first, or drops it where a pool's epoch does not fit (`epoch_episodes`). Pinned entries are never
evicted; past the capacity (episodes whose images went to the drive aside) a warning names the sizes and the fix.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Protocol

from ..config import DEFAULT_FOOTER_BYTES, DEFAULT_INDEX_BYTES
from ..errors import DaliStreamError, RemoteError, VideoFileError
from .episode_fetch import Fetch, Fetcher
from .fork_guard import ForkGuard
from .image_spill import ImageSpill, held_images_said
from .pieces import Pieces, named
from .segments import Segment, cut_segment
from .store_stats import StoreStats
from .tables import FRAME_TIME_S, TableReader, rows_nbytes


@dataclass
class _Episode(Fetch):
    """An episode's entry: its fetch (`fetch.episode_fetch`), what it fetched and who holds it."""

    segments: dict = field(default_factory=dict)
    long: set = field(default_factory=set)  # cameras whose episode is read in pieces (`segment_for`), not whole
    nbytes: int = 0
    reserved: int = 0  # bytes of its rows the image spill let it hold in memory, counted until `nbytes` is
    spilled: bool = False  # its images went to the drive (`fetch.image_spill`): it holds the other columns alone
    refs: int = 0


log = logging.getLogger("dali_stream")


class SegmentDecoders(Protocol):
    """The CPU decoders kept per segment (`decode.cpu.DecoderCache`): the store releases a retired episode's
    decoders and closes all of them with itself. Passed in, so fetching does not depend on decoding."""

    def release(self, seg: Segment) -> None: ...

    def clear(self) -> None: ...


class Held(Protocol):
    """What the decoded-frame cache holds of an episode (`decode.frame_cache.EpisodeHeld`). Passed in, so fetching does
    not depend on decoding."""

    def camera(self, pos: int, camera: str, rows: dict) -> bool: ...

    def columns(self, pos: int) -> frozenset[str]: ...


class _Files:
    """One member's readers: its table rows, and range reads and MP4 indexes of its video files (bounds shared
    with the other members', `TableReader(shared=)`, `IndexCache(shared=)`)."""

    def __init__(self, member, first: "_Files | None", index_bytes: int, footer_bytes: int,
                 table_cache_dir: str | None = None, table_cache_bytes: int | None = None) -> None:
        from ..source.storage import LocalRanges, is_local
        from .indexes import IndexCache

        meta = member.meta
        self.tables: TableReader = TableReader(meta, member.table_keys, footer_bytes=footer_bytes,
                                               shared=first.tables if first is not None else None,
                                               table_cache_dir=table_cache_dir, table_cache_bytes=table_cache_bytes)
        # Range reads for the MP4 index and the indexed cut: the remote file system itself, or the local one
        # behind the same interface (a file the index cannot handle is cut through the demuxer).
        self.ranges = LocalRanges(meta.data_fs) if is_local(meta.data_fs) else meta.data_fs
        self.indexes: IndexCache = IndexCache(self.ranges, index_bytes, fps=float(meta.fps), meta=meta,
                                              shared=first.indexes if first is not None else None)


class EpisodeStore:
    def __init__(self, catalog, tolerance_s: float, capacity_bytes: int, decoders: SegmentDecoders,
                 fetch_workers: int = 4, segment_bytes_limit: int | None = None, *,
                 index_bytes: int = DEFAULT_INDEX_BYTES, footer_bytes: int = DEFAULT_FOOTER_BYTES,
                 epoch_episodes: int | None = None, held: Held | None = None,
                 table_cache_dir: str | None = None, table_cache_bytes: int | None = None) -> None:
        """`catalog` (`dali_stream.meta.catalog.Catalog`): the episode positions and, per member, its metadata and the
        own camera keys fetched with each of its episodes (`Opened.cameras`); a mixture's members share this
        store's bounds. `tolerance_s`: the loader's, unless a member sets its own. `segment_bytes_limit`: an
        episode's camera whose segment would be larger (an hour-long recording) is not fetched whole: each sample
        gets a piece cut for its frames (`segment_for`), from the keyframe before them through the last packet
        they need, read from the file's index; None: always whole. `index_bytes`, `footer_bytes`: the bounds of the
        video files' MP4 indexes and the data files' parsed footers kept (every member's together).
        `epoch_episodes`: the episodes in this rank's epoch where the plan retires an episode for the rest of it (a
        pool): a retired episode comes back only next epoch, after every other one, so where the epoch's episodes do
        not fit `capacity_bytes` an LRU would evict it first and it is dropped at once (`unpin`); None: kept (a
        global shuffle draws an episode's frames all along its epoch). `held`: what the decoded-frame cache holds
        (`Held`): a camera whose every frame it holds is not fetched (a frame the cache lost is cut alone:
        `segment_for`), an episode's rows are read without the columns of images in the tables it holds (one the
        cache lost is read alone: `column`); None: all fetched.
        `table_cache_dir`: where parquet row groups holding many episodes are kept decoded, `table_cache_bytes` of
        them at most (`fetch.decoded_groups`; None: the last few in memory), and where, once the store holds `capacity_bytes`,
        the images stored in the tables of episodes fetched after are kept instead of in memory
        (`fetch.image_spill`; None: in memory)."""
        self.catalog = catalog
        self.segment_bytes_limit = segment_bytes_limit
        self.tolerance_s = tolerance_s
        self.capacity_bytes = int(capacity_bytes)
        self.stats = StoreStats()
        self.decoders = decoders  # the CPU decoders of fetched segments, bounded by their owner
        self.bytes = 0  # bytes held by fetched entries
        self.epoch_episodes, self.held = epoch_episodes, held
        self._fetched = [0, 0]  # bytes and episodes fetched so far: the mean an epoch's bytes are estimated by
        self._reserved = 0  # bytes of rows in memory by the spill's leave whose entries are not counted yet
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, _Episode] = OrderedDict()
        self._warned = False
        self.fetcher = Fetcher(fetch_workers, self._lock, self._read_rows, self._work, self._ended)
        self.files: list[_Files] = []
        for member in catalog.members:
            self.files.append(_Files(member, self.files[0] if self.files else None, index_bytes, footer_bytes,
                                     table_cache_dir, table_cache_bytes))
        self.spill = ImageSpill(table_cache_dir) if table_cache_dir is not None and any(
            m.meta.image_keys for m in catalog.members) else None
        self.tables = self.files[0].tables  # the first member's (every member's share its bounds: `files`)
        self.indexes = self.files[0].indexes  # its `files` and `unsupported` are every member's
        # pieces of long episodes, cut ahead on threads of their own (`fetch.pieces`)
        self.pieces = Pieces(catalog, self.files, segment_bytes_limit, fetch_workers, self.stats, self._tolerance_s,
                             self._entries_of)
        self.fork_guard = ForkGuard(self._threads_ran)

    @property
    def table_bytes_read(self) -> int:
        """Compressed bytes of table row groups read, over every member."""
        return sum(f.tables.bytes_read for f in self.files)

    def _threads_ran(self) -> bool:  # a fetch begun, a thread started (`ForkGuard` asks it in a forked child)
        return self.fetcher.threads_ran() or self.pieces.threads_ran() or any(
            entry.started and not entry.done.is_set() for entry in list(self._entries.values()))

    def close(self, wait: bool = True) -> None:
        """End the fetch threads (pending fetches are cancelled; `wait`: and wait for the running ones), close
        decoders and index containers, and drop the fetched episodes. Safe to call more than once."""
        if self.fork_guard.forked:  # a process forked after the threads ran: all that is the parent's (`fork_guard`)
            return
        # Every episode not fetched yet is failed first, waking whoever waits for it: a piece thread or a builder
        # waiting for a fetch that was cancelled, or never submitted (an interrupt in `pin` between marking it begun
        # and handing it to the pool), would otherwise hold up the shutdowns below forever. A fetch still running
        # finishes on its own (its result is dropped: the entry has failed).
        self._fail_pending()
        self.pieces.close(wait)
        self.fetcher.close(wait)
        self._fail_pending()  # fetches cancelled above never finish: nobody may wait for them
        if wait:
            self.pieces.drop_ahead()
        self.decoders.clear()
        self.indexes.close()  # every member's: they share one cache
        with self._lock:
            self._entries.clear()
            self.bytes = 0

    def _fail_pending(self) -> None:
        """Mark every episode whose fetch has not finished as failed, and wake its waiters."""
        with self._lock:
            for entry in self._entries.values():
                if not entry.done.is_set():
                    entry.fail(DaliStreamError("the loader was closed while this episode was fetched"))

    # ---- refcounts -------------------------------------------------------------------------------------
    def pin(self, positions: list[int]) -> None:
        """Keep each of `positions` until `unpin`; fetch those nobody has started to in the background now: their
        rows in one task (`TableReader.episodes`: a remote store's requests in flight together), each camera in a
        task of its own."""
        self.fork_guard.check()
        starting = []
        with self._lock:
            for pos in positions:
                entry = self._entry(pos)
                entry.refs += 1
                if self.fetcher.pool is not None and not entry.started:
                    entry.started = True
                    starting.append((pos, entry, self.catalog.locate(pos)[0].cameras))
        if starting:
            self.fetcher.fill_together(starting)

    def unpin(self, pos: int) -> None:
        if self.fork_guard.forked:  # nothing was pinned in this process (`pin` raised)
            return
        with self._lock:
            entry = self._entries.get(pos)
            if entry is not None and entry.refs > 0:
                entry.refs -= 1
                if entry.refs == 0:  # retired: keep the bytes (bounded), not its decoders
                    for seg in entry.segments.values():
                        self.decoders.release(seg)
                    if entry.done.is_set() and not self._keeps_retired():
                        del self._entries[pos]
                        self.bytes -= entry.nbytes
                        self.stats.retired_dropped += 1
            self._evict()

    def _keeps_retired(self) -> bool:
        """(lock held) Whether a retired episode may serve again: always in a global shuffle, in a pool only where
        the epoch's episodes fit `capacity_bytes` (estimated from the mean episode fetched so far): over it, a
        least-recently-used cache evicts each one before the next epoch comes back to it."""
        fetched_bytes, fetched = self._fetched
        if self.epoch_episodes is None or not fetched:
            return True
        return fetched_bytes / fetched * self.epoch_episodes <= self.capacity_bytes

    # ---- lookups ---------------------------------------------------------------------------------------
    def rows(self, pos: int) -> dict:
        return self._ready(pos).rows

    def column(self, pos: int, key: str) -> Any:
        """Column `key` of the episode's rows: as fetched, or read alone now where the rows were read without it (the
        decoded-frame cache held every image of that camera, and has lost one since: a spilled file deleted), then
        kept with them."""
        entry = self._ready(pos)
        got = entry.rows.get(key)
        if got is not None:
            return got
        member, local = self.catalog.locate(pos)
        got = self.files[member.index].tables.column(local, key)
        with self._lock:
            self.stats.columns_read_again += 1
            if key not in entry.rows:  # kept with the rows (a new dict: a builder reading the old one reads on)
                entry.rows = {**entry.rows, key: got}
                added = rows_nbytes({key: got})
                entry.nbytes += added
                if self._entries.get(pos) is entry:
                    self.bytes += added
                    self.stats.peak_bytes = max(self.stats.peak_bytes, self.bytes)
        return got

    def _left_out(self, pos: int) -> frozenset[str]:
        """The columns the episode's rows are read without (`Held.columns`)."""
        if self.held is None:
            return frozenset()
        out = self.held.columns(pos)
        if out:
            with self._lock:
                self.stats.columns_left_out += len(out)
        return out

    def segment(self, pos: int, camera: str) -> Segment:
        """The episode's whole segment of `camera` (an error for a long episode's camera: `segment_for`)."""
        entry = self._ready(pos)
        if camera in entry.long:
            raise LookupError(f"episode at position {pos}, camera {camera!r} is read in pieces: use segment_for")
        return entry.segments[camera]

    def segment_for(self, pos: int, camera: str, query_s, key: Hashable = None) -> Segment:
        """A segment holding the frames shown at file times `query_s` (one sample's): the episode's whole segment,
        or for a long episode's camera a piece cut for them alone (used for its batch; its bytes are not cached): the
        one `cut_ahead` asked for under `key` (its batch's task waited for, or run here if no piece thread began it),
        or, none asked for, cut here."""
        entry = self._ready(pos)
        piece = self.pieces.take(key) if key is not None else None
        if piece is not None:
            return piece
        seg = entry.segments.get(camera)
        if seg is not None:
            return seg
        return self.pieces.cut(pos, camera, query_s, key)

    def cut_ahead(self, asks: list[tuple[Hashable, int, str, Callable[[dict], Any]]]) -> None:
        """Begin cutting the pieces a batch's samples will ask for (`Pieces.cut_ahead`)."""
        self.fork_guard.check()
        self.pieces.cut_ahead(asks)

    def may_cut(self, positions: list[int]) -> set[int]:
        """Those of `positions` whose pieces `cut_ahead` may cut (`Pieces.may_cut`)."""
        self.fork_guard.check()
        return self.pieces.may_cut(positions)

    def drop_ahead(self) -> None:
        """Forget the pieces cut ahead that nobody took (`Pieces.drop_ahead`)."""
        if not self.fork_guard.forked:  # none were cut ahead in this process
            self.pieces.drop_ahead()

    def _entries_of(self, positions: list[int]) -> dict[int, _Episode]:
        """The entries of `positions` that exist, under one hold of the lock."""
        with self._lock:
            return {pos: self._entries[pos] for pos in positions if pos in self._entries}

    def _entry(self, pos: int) -> _Episode:
        entry = self._entries.get(pos)
        if entry is None:
            entry = self._entries[pos] = _Episode()
        self._entries.move_to_end(pos)
        return entry

    def _ready(self, pos: int) -> _Episode:
        self.fork_guard.check()
        with self._lock:
            entry = self._entry(pos)
            owner = not entry.started
            entry.started = True
            if not owner:
                self.stats.hits += 1
        if not entry.done.is_set():
            t0 = time.perf_counter()
            if owner:
                self.fetcher.fill(pos, entry, self.catalog.locate(pos)[0].cameras)
            else:
                entry.done.wait()
            with self._lock:
                self.stats.wait_s += time.perf_counter() - t0
        if entry.error is not None:
            raise entry.error
        return entry

    # ---- fetching (the parts' work; `fetch.episode_fetch` runs them) ------------------------------------
    def _read_rows(self, items: list[tuple[int, _Episode]]):
        """The rows of each of `items` (position, entry), read together per member (`TableReader.episodes`): per
        episode, (position, entry, its rows or the error reading them)."""
        by_member: dict[int, list[tuple[int, _Episode, int]]] = {}
        for pos, entry in items:
            member, local = self.catalog.locate(pos)
            by_member.setdefault(member.index, []).append((pos, entry, local))
        for index, members in by_member.items():
            got = self.files[index].tables.episodes([local for *_, local in members],
                                                    [self._left_out(pos) for pos, *_ in members])
            for (pos, entry, _), rows in zip(members, got):
                yield pos, entry, rows if isinstance(rows, BaseException) else self._spilled(pos, entry, rows)

    def _spilled(self, pos: int, entry: _Episode, rows: dict) -> dict:
        """The episode's rows, their image columns kept on the drive (`fetch.image_spill`) where the store would
        hold more than `capacity_bytes` with them. Decided under the lock, rows kept in memory reserving their bytes
        until their entry is counted (`_ended`): fetches ending together, or rows read together, cannot all decide
        on the same room."""
        if self.spill is None:
            return rows
        nbytes = rows_nbytes(rows)
        with self._lock:
            if self.bytes + self._reserved + nbytes <= self.capacity_bytes:
                self._reserved += nbytes
                entry.reserved = nbytes
                return rows
        entry.spilled = True
        return self.spill.rows(rows, self.catalog.locate(pos)[0].meta.image_keys, self.catalog.describe(pos))

    def _work(self, pos: int, entry: _Episode, camera: str | None) -> None:
        """One part of the episode's fetch alone: its rows (None), or `camera`'s segment once the rows are there —
        none for a long episode's camera (read in pieces) or one whose frames the decoded-frame cache all holds."""
        if camera is None:
            member, local = self.catalog.locate(pos)
            entry.rows = self._spilled(pos, entry, self.files[member.index].tables.episode(local, self._left_out(pos)))
        elif self.pieces.in_pieces(pos, camera):  # nothing to fetch: no need to hold a thread for the rows
            entry.long.add(camera)
        else:
            entry.rows_ready.wait()
            if entry.error is None and not (self.held is not None and self.held.camera(pos, camera, entry.rows)
                                            and self._indexed(pos, camera)):
                entry.segments[camera] = self._cut(pos, camera, entry.rows)

    def _ended(self, pos: int, entry: _Episode, background: bool, t0: float) -> None:
        """A part of the entry ended (begun at `t0`); after its last one the entry is done, counted and bounded."""
        with self._lock:
            self.stats.fetch_s += time.perf_counter() - t0
            entry.pending -= 1
            if entry.pending:
                return
            self._reserved -= entry.reserved  # counted in `self.bytes` below, or dropped with a failed entry
            entry.reserved = 0
            self.stats.episodes.add(pos)
            if entry.error is None:
                entry.nbytes = rows_nbytes(entry.rows) + \
                    sum(seg.nbytes for seg in entry.segments.values())
                self.stats.table_reads += 1
                self.stats.prefetches += background
                self.stats.demand_fetches += not background
                self.bytes += entry.nbytes
                self._fetched[0] += entry.nbytes
                self._fetched[1] += 1
                self.stats.peak_bytes = max(self.stats.peak_bytes, self.bytes)
            elif self._entries.get(pos) is entry:  # a later lookup fetches again
                del self._entries[pos]
            entry.done.set()
            self._evict()

    def _indexed(self, pos: int, camera: str) -> bool:
        """Whether the episode's video file of `camera` has an index: a piece of it can be cut."""
        member, local = self.catalog.locate(pos)
        return self.files[member.index].indexes.get(member.meta.video_file(local, camera), camera) is not None

    def _tolerance_s(self, member) -> float:
        """A member's own `tolerance_s`, else the loader's."""
        return member.tolerance_s if member.tolerance_s is not None else self.tolerance_s

    def _cut(self, pos: int, camera: str, rows: dict) -> Segment:
        """The episode's whole segment of `camera` (its packets of [from_timestamp, to_timestamp), file time);
        errors name the episode (and member) and camera."""
        member, local = self.catalog.locate(pos)
        meta, files = member.meta, self.files[member.index]
        cam = meta.cameras[camera]
        start = float(cam.from_timestamp[local])
        path = meta.video_file(local, camera)
        try:
            indexed = files.indexes.get(path, camera)
            seg = cut_segment(files.ranges if indexed is not None else meta.data_fs, path, start,
                              float(cam.to_timestamp[local]), episode=meta.episode_index(local), camera=camera,
                              codec=cam.codec, tolerance_s=self._tolerance_s(member),
                              last_frame_s=start + float(rows[FRAME_TIME_S][-1]), indexed=indexed)
        except (RemoteError, VideoFileError) as exc:
            raise named(exc, self.catalog.describe(pos), camera) from None
        with self._lock:
            self.stats.segments_cut += 1
            self.stats.segment_bytes += seg.nbytes
        return seg

    def _evict(self) -> None:
        """Drop unpinned fetched entries, least recently used first, while over capacity (lock held)."""
        if self.bytes <= self.capacity_bytes:
            return
        for pos in list(self._entries):
            entry = self._entries[pos]
            if entry.refs == 0 and entry.done.is_set():
                del self._entries[pos]
                self.bytes -= entry.nbytes
                self.stats.evictions += 1
                if self.bytes <= self.capacity_bytes:
                    return
        if not self._warned and self.bytes - sum(  # the images on the drive: their episodes' other columns stay
                e.nbytes for e in self._entries.values() if e.spilled) > self.capacity_bytes:
            self._warned = True
            pinned = [(pos, e) for pos, e in self._entries.items() if e.refs > 0]
            warnings.warn(
                f"the episode cache holds {self.bytes / 2**20:.1f} MiB in {len(pinned)} pinned episodes, more than "
                f"cache_bytes={self.capacity_bytes} ({self.capacity_bytes / 2**20:.1f} MiB): the pool and the "
                "batches in flight need them all; raise cache_bytes or lower episode_pool_size"
                + self._images_said(pinned), stacklevel=2)

    def _images_said(self, pinned: list) -> str:
        """(lock held) Where the pinned episodes' rows hold images stored in the tables, how much and what to do."""
        images: dict[str, int] = {}
        for pos, entry in pinned:
            meta = self.catalog.locate(pos)[0].meta
            for key in (k for k in meta.image_keys if k in entry.rows):
                images[key] = images.get(key, 0) + rows_nbytes({key: entry.rows[key]})
        return held_images_said(images, self.epoch_episodes is None, self.spill is not None)
