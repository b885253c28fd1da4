"""Cut one episode of one camera out of a packed MP4 into a small standalone stream, without re-encoding.

The segment starts at the latest keyframe whose pts is at or before the episode's `from_timestamp` and
holds every packet in decode order until the first packet whose dts reaches `to_timestamp`: a frame's
references decode before it, so that prefix of a closed-GOP stream decodes completely. Packets keep their
original pts, and the segment records its frames' presentation times (sorted packet pts): frame *k* that
a decoder returns from the segment is the one shown at `pts_s[k]`. Frames are always found by pts,
never by index arithmetic (B-frames reorder them; a segment can start frames before its episode).

Local files are cut by demuxing (seek, then read packets). Remote files with an `mp4index` are cut from
the sample index by the same rule: one range request for the packets, no demuxer opened per episode. The
two give the same packets (bytes, pts, dts, duration, keyframes); the indexed cut has no `sdtp` box
(PyAV cannot set a packet's disposable flag), which decoders do not read.
"""

from __future__ import annotations

import bisect
import functools
import io
import itertools
import struct
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

import numpy as np

from ..errors import DecodeError, FrameTimestampError, VideoFileError
from .mp4write import write_mp4

FIX_FILE = ("re-download the file, or re-encode the camera with lerobot; `dali-stream verify DATASET --decode` lists "
            "every damaged file of the dataset and the episodes each holds")
_serials = itertools.count()  # Segment.uid: never reused in a process (an id() is, once its object is freed)


@dataclass
class Segment:
    """An episode's encoded frames for one camera, as a standalone MP4 in memory (`data`).

    A piece cut from a file's index for one sample (`fetch.pieces`) is kept as its samples back to back (`body`)
    beside their packet table; its MP4 is written only if a decoder opens it alone (`data`): a batch's pieces are
    joined into one stream from their bodies (`graph.joined.join_pieces`), so writing one per piece is work thrown
    away on every batch of a global shuffle. Whatever reads packets by `packets()` positions reads `body`."""

    body: bytes  # what `packets()` positions point into: the MP4 itself, or a piece's samples back to back
    pts_s: np.ndarray  # (N,) float64, sorted presentation times of the segment's frames, in file time
    source: str  # the packed file it was cut from
    episode: int
    camera: str
    codec: str
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    uid: int = field(default_factory=lambda: next(_serials), repr=False)  # what caches key a segment by
    _packets: PacketIndex | None = field(default=None, repr=False)  # made on first use
    _resets: np.ndarray | None = field(default=None, repr=False)  # made on first use
    origin_s: float | None = field(default=None, repr=False)  # a decoder's time of frame 0 (`decode.cpu`)
    # a piece of a long episode, cut for one sample's frames (`fetch.pieces`), or a batch's pieces joined
    # (`graph.joined.join_pieces`): used for one batch, its decoders not kept
    piece: bool = field(default=False, repr=False)
    _write: Callable[[bytes], bytes] | None = field(default=None, repr=False)  # body -> the MP4 (a piece's)

    @functools.cached_property
    def data(self) -> bytes:
        """The segment as a standalone MP4 (a piece's written on first use)."""
        return self.body if self._write is None else self._write(self.body)

    @property
    def nbytes(self) -> int:
        return len(self.body)

    @functools.cached_property
    def half_gap_s(self) -> float:
        """Half the shortest time between two of the segment's frames: a decoded frame whose time is farther than
        this from a planned frame's is another frame (computed once: it is read on every torchcodec call)."""
        gaps = np.diff(self.pts_s)
        return float(gaps.min()) / 2 if len(gaps) else float("inf")

    def size(self) -> tuple[int, int] | None:
        """(height, width) of the segment's pictures as its MP4 sample entry states them (None: a layout read by
        PyAV, whose sample entry is not kept)."""
        return entry_size(self.packets().stsd)

    def packets(self) -> PacketIndex:
        """The segment's packets in decode order (`PacketIndex`): DALI routes cut per-sample clips by it."""
        with self.lock:
            if self._packets is None:
                self._packets = packet_index(self.data)
            return self._packets

    def resets(self) -> np.ndarray:
        """(N,) bool per packet (decode order): a keyframe that resets the decoder (`fetch.nal.starts_stream`: not an
        H.264 I picture without IDR), where a DALI clip may start; computed once."""
        index = self.packets()
        with self.lock:
            if self._resets is None:
                found = index.key.copy()
                if index.stsd is not None:
                    from . import nal

                    for k in np.flatnonzero(found):
                        sample = self.body[int(index.pos[k]):int(index.pos[k] + index.size[k])]
                        try:
                            found[k] = nal.starts_stream(index.stsd, sample)
                        except (ValueError, IndexError):  # a configuration nal does not read: trust the flag
                            pass
                self._resets = found
            return self._resets

    @functools.cached_property
    def _pts_list(self) -> list[float]:
        """`pts_s` as Python floats, for `frame_indices`' one-frame asks."""
        return self.pts_s.tolist()

    def frame_indices(self, query_s: np.ndarray, tolerance_s: float, what: str) -> np.ndarray:
        """Index of the frame whose pts is nearest each query time; error if one is farther than tolerance."""
        if len(query_s) == 1 and len(self.pts_s) > 1:  # a sample without a window: the same answer by `bisect` on
            q, pts = float(query_s[0]), self._pts_list  # floats, ~1/6 of the numpy calls' time (asked a camera a sample)
            at = min(max(bisect.bisect_left(pts, q), 1), len(pts) - 1)
            k = at - 1 if abs(q - pts[at - 1]) <= abs(pts[at] - q) else at
            if abs(pts[k] - q) <= tolerance_s:
                return np.array([k], dtype=np.int32)
        query_s = np.asarray(query_s, dtype=np.float64)
        pos = np.searchsorted(self.pts_s, query_s).clip(1, len(self.pts_s) - 1)
        left, right = self.pts_s[pos - 1], self.pts_s[pos]
        idx = np.where(np.abs(query_s - left) <= np.abs(right - query_s), pos - 1, pos)
        if len(self.pts_s) == 1:
            idx = np.zeros_like(pos)
        dist = np.abs(self.pts_s[idx] - query_s)
        bad = dist > tolerance_s
        if bad.any():
            raise FrameTimestampError(
                f"episode {self.episode}, camera {self.camera!r} ({what}): no frame within tolerance_s={tolerance_s} "
                f"of file timestamps {query_s[bad].round(6).tolist()} (nearest frames at "
                f"{self.pts_s[idx[bad]].round(6).tolist()}, segment spans {self.pts_s[0]:.6f}..{self.pts_s[-1]:.6f}s "
                f"of {self.source}); the video and the episodes table disagree: check from_timestamp/fps, "
                "or raise tolerance_s if the camera's clock jitters"
            )
        return idx.astype(np.int32)


def _open(fs, path: str, episode: int, camera: str):
    import av

    try:
        raw = fs.open(path, "rb")
    except FileNotFoundError:
        raise VideoFileError(
            f"video file {path} is missing (episode {episode}, camera {camera!r}); the dataset is incomplete: "
            "re-download videos/ (with hf: include the video files in allow_patterns)"
        ) from None
    try:
        container = av.open(raw, "r")
    except Exception as exc:  # av.error.InvalidDataError and friends
        _raise_remote(exc, episode, camera)
        head = _head(fs, path)
        raw.close()
        what, why = ("is empty (0 bytes)", "a download or copy cut short") if not head and fs.size(path) == 0 else \
            ("is not a readable MP4", f"{exc}; first bytes {head!r}")
        raise VideoFileError(f"video file {path} {what} (episode {episode}, camera {camera!r}): {why}; {FIX_FILE}"
                             ) from exc
    if not container.streams.video:
        container.close()
        raw.close()
        raise VideoFileError(
            f"video file {path} has no readable video track (episode {episode}, camera {camera!r}): its index "
            f"(the moov box) is damaged or the file holds no video; {FIX_FILE}")
    return raw, container


def _raise_remote(exc: BaseException, episode: int, camera: str) -> None:
    """A remote read failure surfacing through PyAV is a RemoteError (named), not a broken file."""
    from ..source.remote import RemoteError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, RemoteError):
            raise RemoteError(f"{seen} (episode {episode}, camera {camera!r})") from None
        seen = seen.__cause__ or seen.__context__


def _head(fs, path: str, n: int = 48) -> bytes:
    try:
        with fs.open(path, "rb") as f:
            return f.read(n)
    except Exception:
        return b""


def cut_segment(fs, path: str, from_s: float, to_s: float, *, episode: int, camera: str, codec: str,
                tolerance_s: float, last_frame_s: float, indexed=None) -> Segment:
    """Remux the packets of [from_s, to_s) (file time) into a standalone MP4; see the module docstring.

    `last_frame_s` is the file time of the episode's last frame: a file that ends before it is truncated.
    `indexed` (an `indexes.IndexedFile`; `fs` then reads ranges: a RemoteFS or `storage.LocalRanges`) builds the
    segment from the sample index and one read of exactly its packets; without it a demuxer reads the file
    through `fs.open`.
    """
    if indexed is not None:
        return _cut_indexed(fs, path, from_s, to_s, indexed, episode=episode, camera=camera, codec=codec,
                            tolerance_s=tolerance_s, last_frame_s=last_frame_s)
    import av

    raw, src = _open(fs, path, episode, camera)
    try:
        stream = src.streams.video[0]
        tb = stream.time_base
        num, den = tb.numerator, tb.denominator  # ticks * num / den: ints divide exactly as float(ticks * tb)
        eps = 1e-6
        margin = 0.0
        while True:
            target = max(0.0, from_s - margin)
            src.seek(int(target / tb), stream=stream, backward=True, any_frame=False)
            packets: list[Any] = []
            reached_end = True  # no packet at or after to_s: the file ended inside the episode
            try:
                for pkt in src.demux(stream):
                    if pkt.pts is None or pkt.size == 0:
                        continue
                    t_pts = pkt.pts * num / den
                    t_dts = (pkt.dts if pkt.dts is not None else pkt.pts) * num / den
                    if pkt.is_keyframe and t_pts <= from_s + eps:
                        packets = []  # a later keyframe still at or before the episode start: cut from it
                    elif not packets and not pkt.is_keyframe:
                        continue
                    if packets and t_dts >= to_s - eps:
                        reached_end = False
                        break
                    packets.append(pkt)
            except Exception as exc:
                _raise_remote(exc, episode, camera)
                if not isinstance(exc, av.error.FFmpegError):
                    raise
                raise VideoFileError(
                    f"video file {path} is corrupt near {from_s:.3f}..{to_s:.3f}s (episode {episode}, camera "
                    f"{camera!r}): {exc}; {FIX_FILE}"
                ) from exc
            first = packets[0].pts * num / den if packets else None
            if first is not None and first <= from_s + tolerance_s:
                break
            if target <= 0.0:
                raise _no_keyframe(path, from_s, episode, camera, first)
            margin = max(1.0, 2 * margin)  # the demuxer's index landed after the start: look further back
        pts = np.sort(np.array([p.pts * num / den for p in packets]))
        _check_end(path, pts, reached_end, last_frame_s, tolerance_s, episode, camera)
        return Segment(mux(stream, packets), pts, path, episode, camera, codec)
    finally:
        src.close()
        raw.close()


def _cut_indexed(fs, path: str, from_s: float, to_s: float, indexed, *, episode: int, camera: str, codec: str,
                 tolerance_s: float, last_frame_s: float) -> Segment:
    """The same cut as the demuxing path, with packets taken from the index and one range request."""
    span = indexed_span(path, from_s, to_s, indexed, episode=episode, camera=camera, tolerance_s=tolerance_s)
    return indexed_segment(fs.read_range(path, span.start, span.end), span.start, span, path, indexed,
                           episode=episode, camera=camera, codec=codec, tolerance_s=tolerance_s,
                           last_frame_s=last_frame_s)


@dataclass(frozen=True)
class IndexedSpan:
    """What a cut from a file's index reads: the track's samples [first, stop), file bytes [start, end)."""

    first: int
    stop: int
    start: int
    end: int


def indexed_span(path: str, from_s: float, to_s: float, indexed, *, episode: int, camera: str,
                 tolerance_s: float) -> IndexedSpan:
    """The samples and bytes of the cut of [from_s, to_s) (file time) from `indexed`'s index (module doc)."""
    index = indexed.index
    span = index.cut(from_s, to_s)
    if span is None:
        raise _no_keyframe(path, from_s, episode, camera, None)
    first, stop = span
    if index.pts_at(first) / index.timescale > from_s + tolerance_s:
        raise _no_keyframe(path, from_s, episode, camera, index.pts_at(first) / index.timescale)
    return IndexedSpan(first, stop, *index.byte_range(first, stop))


def indexed_segment(data: bytes, at: int, span: IndexedSpan, path: str, indexed, *, episode: int, camera: str,
                    codec: str, tolerance_s: float, last_frame_s: float, piece: bool = False) -> Segment:
    """The segment of `span`'s samples from `data`, file bytes read from offset `at` (holding the span's)."""
    index = indexed.index
    first, stop, ts = span.first, span.stop, index.timescale
    samples = index.span(first, stop)
    keep: Any = samples.sizes > 0
    if keep.all():  # no empty samples (the usual case): views, no copies
        keep = slice(None)
    sizes = samples.sizes[keep]
    payload = samples_bytes(data, at, samples.offsets[keep], sizes)
    dts, ticks = samples.dts[keep], samples.pts[keep]
    durations, sync = samples.durations[keep], samples.sync[keep]
    pts = np.sort(ticks / ts)  # as float(pts * tb), exactly
    _check_end(path, pts, stop == index.count, last_frame_s, tolerance_s, episode, camera)
    write = functools.partial(write_mp4, index.stsd, ts, sizes, dts, ticks, durations, sync)
    if piece:  # its MP4 written only if a decoder opens it alone (`Segment`)
        seg = Segment(payload, pts, path, episode, camera, codec, piece=True, _write=write)
        seg._packets = written_packets(0, sizes, dts, ticks, durations, sync, ts, index.stsd)
        return seg
    segment = write(payload)
    seg = Segment(segment, pts, path, episode, camera, codec)
    seg._packets = written_packets(len(segment) - len(payload), sizes, dts, ticks, durations, sync, ts, index.stsd)
    return seg


def written_packets(mdat: int, sizes: np.ndarray, dts: np.ndarray, pts: np.ndarray, durations: np.ndarray,
                    sync: np.ndarray, timescale: int, stsd: bytes) -> PacketIndex:
    """The `PacketIndex` that reading back what `write_mp4` wrote gives (`packet_index`), without reading it: its
    samples from byte `mdat` on; times on the written track's timeline (dts from 0 by the written deltas, then
    shifted by the edit that starts at the earliest pts); durations as the deltas say. A piece per sample is cut
    this way on every batch of a global shuffle, so parsing it back would cost as much as writing it."""
    # ndarray methods and buffers filled in place: a piece holds two or three packets, so numpy's per-call cost,
    # not the arithmetic, is what this costs
    sizes, dts, pts = (np.asarray(a, dtype=np.int64) for a in (sizes, dts, pts))
    n = len(sizes)
    deltas = np.empty(n, np.int64)
    np.subtract(dts[1:], dts[:-1], out=deltas[:-1])
    deltas[-1] = durations[-1]
    np.maximum(deltas, 0, out=deltas)
    start = int(pts.min()) - int(dts[0])
    written = np.empty(n, np.int64)
    written[0] = -start
    np.cumsum(deltas[:-1], out=written[1:])
    written[1:] -= start
    pos = sizes.cumsum()
    pos += mdat - sizes
    return PacketIndex(pos, sizes, written + (pts - dts), written, deltas, np.asarray(sync, dtype=bool),
                       _time_base(timescale), stsd)


@functools.lru_cache(maxsize=64)
def _time_base(timescale: int) -> Fraction:
    return Fraction(1, timescale)


def samples_bytes(data: bytes, start: int, offsets: np.ndarray, sizes: np.ndarray) -> bytes:
    """The samples at file `offsets` (decode order) back to back, from `data` read at file offset `start`."""
    if len(offsets) and np.array_equal(offsets[1:], offsets[:-1] + sizes[:-1]):
        first = int(offsets[0]) - start
        return data[first:first + int(sizes.sum())]  # one run of samples (a video-only file): no copy per sample
    return b"".join(data[o - start:o - start + n] for o, n in zip(offsets.tolist(), sizes.tolist()))


def mux(template, packets) -> bytes:
    """The packets as a standalone MP4 whose stream copies `template`'s codec parameters."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as dst:
        out = dst.add_stream_from_template(template, opaque=True)
        for pkt in packets:
            pkt.stream = out
            dst.mux(pkt)
    return buf.getvalue()


def _no_keyframe(path: str, from_s: float, episode: int, camera: str, first: float | None) -> VideoFileError:
    return VideoFileError(
        f"video file {path} has no keyframe at or before {from_s:.6f}s, where episode {episode} "
        f"(camera {camera!r}) starts (first usable packet: {'none' if first is None else f'{first:.6f}s'}); "
        f"the file is truncated, or the episodes table points at the wrong file or has a wrong "
        f"from_timestamp; {FIX_FILE}"
    )


def _check_end(path: str, pts: np.ndarray, reached_end: bool, last_frame_s: float, tolerance_s: float,
               episode: int, camera: str) -> None:
    if reached_end and pts[-1] < last_frame_s - tolerance_s:  # else frame_indices names the gap
        raise VideoFileError(
            f"video file {path} ends at {pts[-1]:.6f}s but episode {episode} (camera {camera!r}) has frames "
            f"up to {last_frame_s:.6f}s (from_timestamp + the last row's timestamp): the file is truncated, or "
            f"the episodes table's from_timestamp for it is wrong; {FIX_FILE}"
        )


def decode_error(seg: Segment, route: str, exc: BaseException) -> DecodeError:
    """A DecodeError for a segment a decoder rejected, naming the layer and showing the first bytes."""
    return DecodeError(
        f"{route} could not decode episode {seg.episode}, camera {seg.camera!r} ({seg.codec}, {seg.nbytes} bytes "
        f"cut from {seg.source}): {exc}; first bytes {seg.data[:32]!r}. The encoded stream is corrupt: "
        f"{FIX_FILE}"
    )


@dataclass(frozen=True)
class PacketIndex:
    """The packets of a segment's MP4 in decode order: where each one's bytes lie and its timing."""

    pos: np.ndarray  # (N,) int64 byte offset in the segment's data
    size: np.ndarray  # (N,) int64
    pts: np.ndarray  # (N,) int64 ticks of `time_base`
    dts: np.ndarray
    duration: np.ndarray
    key: np.ndarray  # (N,) bool
    time_base: Fraction
    stsd: bytes | None = None  # the track's `stsd` box, for clips written by `mp4write` (None: remux by PyAV)


def entry_size(stsd: bytes | None) -> tuple[int, int] | None:
    """(height, width) of the first visual sample entry of an `stsd` box (ISO 14496-12: box header, version and
    flags, entry count, then the entry: its header, 6 reserved bytes, the data reference index, 16 bytes of
    pre-defined and reserved fields, then width and height as 16-bit integers)."""
    if stsd is None or len(stsd) < 16 + 36:
        return None
    width, height = struct.unpack_from(">HH", stsd, 16 + 32)
    return (height, width) if width and height else None


def packet_index(data: bytes) -> PacketIndex:
    """Every packet of a segment's bytes, read from its own `moov` with numpy as `mp4index` reads files; a
    layout that index does not take is demuxed once by PyAV instead."""
    from .mp4index import Damaged, IndexUnsupported, track_of

    try:
        timescale, offsets, sizes, dts, pts, durations, sync, stsd = track_of(data)
    except (IndexUnsupported, Damaged, struct.error, IndexError, ValueError):
        return _demuxed_packets(data)
    keep = sizes > 0
    return PacketIndex(offsets[keep], sizes[keep], pts[keep], dts[keep], durations[keep], sync[keep],
                       Fraction(1, timescale), stsd)


def _demuxed_packets(data: bytes) -> PacketIndex:
    import av

    rows = []
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        time_base = stream.time_base
        for pkt in container.demux(stream):
            if pkt.size == 0 or pkt.pts is None:
                continue
            rows.append((pkt.pos, pkt.size, pkt.pts, pkt.dts if pkt.dts is not None else pkt.pts,
                         pkt.duration or 0, pkt.is_keyframe))
    cols = list(zip(*rows)) if rows else [()] * 6
    ints = [np.asarray(c, dtype=np.int64) for c in cols[:5]]
    pos, size, pts, dts, duration = ints
    return PacketIndex(pos, size, pts, dts, duration, np.asarray(cols[5], dtype=bool), time_base)
