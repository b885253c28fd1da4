"""Pieces of long episodes: a camera whose episode would take more than `limit` bytes (an hour-long recording) is
not fetched whole; each sample gets a piece cut from the file's index for its frames alone, used for its batch
(`graph.joined.join_pieces` joins a batch's pieces of a camera into one stream for torchcodec).

The loader asks for the pieces of the batches its builders are about to build (`cut_ahead`), so the piece threads
read them while earlier batches decode (on a remote source: requests in parallel, not one per sample in the
builder). A builder that finds its batch's task not begun (the piece threads busy, or starved of CPU) runs the task
itself: its reads are coalesced all the same. Where no task was asked for, the builder cuts its piece alone
(`EpisodeStore.segment_for`).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from ..errors import RemoteError, VideoFileError
from .segments import IndexedSpan, Segment, indexed_segment, indexed_span
from .spans import read_spans

FIX_INDEX = "the file changed while the loader ran, or reads of it fail: check the file and its storage"


def named(exc: BaseException, where: str, camera: str) -> BaseException:
    """`exc`, naming the episode (`where`: "episode 3", or for a mixture "member 'lab' episode 3") and camera it
    happened on unless it does already."""
    if f"({where}," in str(exc):
        return exc
    out = type(exc)(f"{exc} ({where}, camera {camera!r})")
    out.__dict__.update(exc.__dict__)  # what the error carries besides its text (a damaged file's path and box)
    return out


@dataclass
class PieceCut:
    """Where one sample's piece of a long episode's camera lies (`Pieces.plan`)."""

    pos: int
    camera: str
    key: Hashable  # the caller's name for it (`log`)
    path: str
    files: Any  # the member's readers (`fetch.store._Files`)
    indexed: Any  # the file's `indexes.IndexedFile`
    span: IndexedSpan
    last_s: float  # file time of the last frame asked
    tolerance_s: float
    episode: int  # its episode_index
    codec: str


class _BatchTask:
    """One batch's pieces (`Pieces._pieces` of its `asks`), run once: by a piece thread, or by the builder that asks
    for one of them first (`take`). `result`: a result per ask, or the exception the task raised."""

    def __init__(self, asks: list) -> None:
        self.asks = asks
        self._claim = threading.Lock()
        self._claimed = False
        self.done = threading.Event()
        self.result: list | BaseException = []

    def claim(self) -> bool:
        """Whether this caller runs the task (nobody did yet); from now on nobody else will."""
        with self._claim:
            claimed, self._claimed = self._claimed, True
        return not claimed

    def run(self, pieces: Callable[[list], list]) -> bool:
        """Run the task here unless somebody claimed it already: whether it ran here."""
        if not self.claim():
            return False
        try:
            self.result = pieces(self.asks)
        except Exception as exc:  # noqa: BLE001 - every taker of the batch raises it
            self.result = exc
        except BaseException:  # a Ctrl-C landing in a builder running it is the caller's alone: raised here once,
            self.result = [None] * len(self.asks)  # and the other asks' builders cut their own
            raise
        finally:
            self.done.set()
        return True

    def cancel(self) -> bool:
        """Whether the task was not begun: it never will be, and every ask's result is None (its builder cuts its
        own)."""
        if not self.claim():
            return False
        self.result = [None] * len(self.asks)
        self.done.set()
        return True

    def outcome(self, n: int) -> Any:
        """Ask `n`'s result once the task is done (raises what the task raised)."""
        self.done.wait()
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result[n]


class Pieces:
    """The piece cutter of an `EpisodeStore` (module doc): `limit` (None: every camera fetched whole), its own
    `workers` threads (a piece waits for its episode's rows, which the fetch threads bring, so sharing those
    threads could leave every one of them waiting). `files[member.index]`: a member's readers; `tolerance_s(member)`;
    `entries_of(positions)`: the store's entries of those episodes that have one (`started`, `done`, `error`,
    `long`, `rows`), read under one hold of the store's lock (a batch asks tens of them); `stats`:
    the store's counters, whose `pieces_*` fields are this cutter's."""

    def __init__(self, catalog, files: list, limit: int | None, workers: int, stats,
                 tolerance_s: Callable[[Any], float], entries_of: Callable[[list[int]], dict]) -> None:
        self.catalog, self.files, self.limit, self.stats = catalog, files, limit, stats
        self.tolerance_s, self.entries_of = tolerance_s, entries_of
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="dali-stream-piece") \
            if workers > 0 and limit is not None else None
        # caller's key -> (the task cutting its batch's pieces, its place in the task's result: the piece, None when
        # the camera is fetched whole after all, or the cut's error)
        self._ahead: dict[Hashable, tuple[_BatchTask, int]] = {}
        self.ahead_bytes = 0  # bytes of pieces cut ahead and not taken yet
        self.log: list | None = None  # a list: each piece cut appends its key (benchmarks' exact accounting)

    def may_cut(self, positions: list[int]) -> set[int]:
        """Those of `positions` whose episode `cut_ahead` may cut pieces of (`_may_cut`, any camera); none without
        piece threads."""
        if self._pool is None:
            return set()
        return {pos for pos, entry in self.entries_of(positions).items() if _may_cut(entry)}

    def threads_ran(self) -> bool:
        """Whether a piece thread was started (a process forked since has none of them)."""
        return self._pool is not None and bool(self._pool._threads)

    def close(self, wait: bool) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=True)

    def in_pieces(self, pos: int, camera: str) -> bool:
        """Whether the episode's segment of `camera` would exceed `limit`, so that each sample reads a piece of it
        (from the file's index; a file without one is cut whole)."""
        if self.limit is None:
            return False
        member, local = self.catalog.locate(pos)
        path = member.meta.video_file(local, camera)
        try:
            indexed = self.files[member.index].indexes.get(path, camera)
        except (RemoteError, VideoFileError) as exc:
            raise named(exc, self.catalog.describe(pos), camera) from None
        if indexed is None:
            return False
        cam = member.meta.cameras[camera]
        span = indexed.index.cut(float(cam.from_timestamp[local]), float(cam.to_timestamp[local]))
        if span is None:
            return False  # the whole cut names the problem
        start, end = indexed.index.byte_range(*span)
        return end - start > self.limit

    def take(self, key: Hashable) -> Segment | None:
        """The piece `cut_ahead` asked for under `key`, or None: none was asked for, or the camera is fetched whole.
        Its batch's task not begun yet, it runs here, on the builder's thread (its reads coalesced as on a piece
        thread); begun, it is waited for."""
        with self._lock:
            ahead = self._ahead.pop(key, None)
        if ahead is None:
            return None
        batch, n = ahead
        if batch.run(self._pieces):
            with self._lock:
                self.stats.batches_taken_over += 1
        piece = batch.outcome(n)
        if isinstance(piece, BaseException):
            raise piece  # the cut's error, as a cut by the builder would raise it
        if piece is not None:
            with self._lock:
                self.ahead_bytes -= piece.nbytes
                self.stats.pieces_ahead += 1
        return piece

    def cut(self, pos: int, camera: str, query_s, key: Hashable) -> Segment:
        """The piece of episode `pos`'s `camera` for file times `query_s`, read here."""
        cut = self.plan(pos, camera, query_s, key)
        try:
            data = cut.files.ranges.read_range(cut.path, cut.span.start, cut.span.end)
        except (RemoteError, VideoFileError) as exc:
            raise named(exc, self.catalog.describe(pos), camera) from None
        return self.make(cut, data, cut.span.start)

    def plan(self, pos: int, camera: str, query_s, key: Hashable) -> PieceCut:
        """Where the piece of episode `pos`'s `camera` for file times `query_s` lies: from the keyframe before the
        first through the last packet decoded before the last is shown (its dts is at most its pts)."""
        member, local = self.catalog.locate(pos)
        meta, files = member.meta, self.files[member.index]
        first, last = float(min(query_s)), float(max(query_s))
        path = meta.video_file(local, camera)
        tolerance_s, episode = self.tolerance_s(member), meta.episode_index(local)
        try:
            indexed = files.indexes.get(path, camera)
            if indexed is None:  # readable when the episode was fetched; a later read failed
                raise VideoFileError(f"video file {path} lost its index ({files.indexes.unsupported.get(path)}); "
                                     f"{FIX_INDEX}")
            span = indexed_span(path, first, last + 0.5 / meta.fps, indexed, episode=episode, camera=camera,
                                tolerance_s=tolerance_s)
        except (RemoteError, VideoFileError) as exc:
            raise named(exc, self.catalog.describe(pos), camera) from None
        return PieceCut(pos, camera, key, path, files, indexed, span, last, tolerance_s, episode,
                        meta.cameras[camera].codec)

    def make(self, cut: PieceCut, data: bytes, at: int) -> Segment:
        """The piece `cut` plans, from `data` read at file offset `at` (holding its bytes)."""
        try:
            seg = indexed_segment(data, at, cut.span, cut.path, cut.indexed, episode=cut.episode, camera=cut.camera,
                                  codec=cut.codec, tolerance_s=cut.tolerance_s, last_frame_s=cut.last_s, piece=True)
        except (RemoteError, VideoFileError) as exc:
            raise named(exc, self.catalog.describe(cut.pos), cut.camera) from None
        with self._lock:
            self.stats.pieces_cut += 1
            self.stats.piece_bytes += seg.nbytes
            if self.log is not None:
                self.log.append(cut.key)
        return seg

    def cut_ahead(self, asks: list[tuple[Hashable, int, str, Callable[[dict], Any]]]) -> None:
        """Begin cutting, on a piece thread, the pieces a batch's samples will ask for: per (key, pos, camera,
        query_of) the piece of episode `pos`'s `camera` for the file times `query_of(rows)` (rows: the episode's
        table rows; None: no piece wanted), for `take(key)`. One task for the batch, its reads coalesced and, on a
        remote store, in flight together (`fetch.spans`), run by a piece thread or by the batch's builder, whichever
        comes first. Nothing to do for a camera fetched whole, known once its episode is fetched (without piece
        threads: never)."""
        if self._pool is None:
            return
        entries = self.entries_of([ask[1] for ask in asks])
        wanted = [ask for ask in asks if _may_cut(entries.get(ask[1]), ask[2])]
        if not wanted:
            return
        batch = _BatchTask(wanted)
        with self._lock:
            try:
                self._pool.submit(batch.run, self._pieces)
            except RuntimeError:  # closing: the builders cut their own
                return
            for n, ask in enumerate(wanted):
                self._ahead[ask[0]] = (batch, n)

    def _pieces(self, asks: list) -> list:
        """Per ask (`cut_ahead`), its piece once its episode's fetch (begun when it was pinned) is done; None (the
        builder cuts its own, or finds the failure) when the camera is fetched whole or the episode's fetch failed
        or never began: a piece thread never fetches an episode itself; or the error its cut raised."""
        out: list[Any] = [None] * len(asks)
        cuts: dict[int, list[tuple[int, PieceCut]]] = {}  # a member's readers -> its pieces
        entries = self.entries_of([ask[1] for ask in asks])
        for n, (key, pos, camera, query_of) in enumerate(asks):
            entry = entries.get(pos)
            if entry is None or not entry.started:
                continue
            entry.done.wait()
            if entry.error is not None or camera not in entry.long:
                continue
            try:
                query = query_of(entry.rows)
                if query is None:  # the decoded-frame cache holds its frames: its builder asks for no piece
                    with self._lock:
                        self._ahead.pop(key, None)
                    continue
                cut = self.plan(pos, camera, query, key)
            except Exception as exc:  # noqa: BLE001 - its builder raises it
                out[n] = exc
                continue
            cuts.setdefault(id(cut.files), []).append((n, cut))
        for planned in cuts.values():
            try:
                reads = read_spans(planned[0][1].files.ranges,
                                   [(cut.path, cut.span.start, cut.span.end) for _, cut in planned])
            except (RemoteError, VideoFileError) as exc:
                for n, cut in planned:
                    out[n] = named(exc, self.catalog.describe(cut.pos), cut.camera)
                continue
            for (n, cut), (at, data) in zip(planned, reads):
                try:
                    out[n] = self.make(cut, data, at)
                except Exception as exc:  # noqa: BLE001 - its builder raises it
                    out[n] = exc
        with self._lock:  # counted once they are the task's result (a Ctrl-C before leaves none held)
            self.ahead_bytes += sum(piece.nbytes for piece in out if isinstance(piece, Segment))
            self.stats.pieces_ahead_peak = max(self.stats.pieces_ahead_peak, self.ahead_bytes)
        return out

    def drop_ahead(self) -> None:
        """Forget the pieces cut ahead that nobody took (the epoch stopped, or the loader closes)."""
        with self._lock:
            ahead, self._ahead = self._ahead, {}
        for batch, n in ahead.values():
            if batch.cancel():
                continue
            try:
                piece = batch.outcome(n)
            except Exception:  # noqa: BLE001 - nobody asked for it: its error is nobody's. Not BaseException: a
                continue       # Ctrl-C landing in this wait (an epoch's end) must stop the loop, not be dropped
            if not isinstance(piece, Segment):
                continue
            with self._lock:
                self.ahead_bytes -= piece.nbytes
                self.stats.pieces_dropped += 1


def _may_cut(entry, camera: str | None = None) -> bool:
    """Whether pieces of `entry`'s episode (of `camera`; None: of any camera) may be cut ahead: its fetch begun, and
    either still running or done without error with that camera (some camera) read in pieces."""
    if entry is None or not entry.started:
        return False
    if not entry.done.is_set():
        return True
    return entry.error is None and (camera in entry.long if camera is not None else bool(entry.long))
