"""The sample index of an MP4 (its `moov` box), so an episode costs one range read for its packets.

`read_index(rfs, path)` walks the file's top-level boxes with small range reads (the first 4 KB, one
16-byte header per later box, then the whole `moov`) and parses the video track's sample tables
(stts/ctts/stss/stsz/stsc/stco|co64, mdhd timescale, elst shift) into per-sample offset, size, dts, pts,
duration and keyframe flag, exactly as FFmpeg's mov demuxer reports them (tests compare every packet of
H.264 with B-frames, HEVC, AV1 and VP9 files). `Mp4Index.cut(from_s, to_s)` names the samples an
episode's segment holds: the same rule as the demuxing cut in `segments`, so `segments.cut_segment` can
build the segment from one range request without opening a demuxer per episode.

`IndexCache` keeps each file's index plus one opened container whose stream is the template the
segments are muxed with (opened once per file over the bytes read here).

Unsupported layouts (fragmented MP4, no video track, several edits) raise `IndexUnsupported`; the caller
then cuts through the demuxer and plain range requests.

Why not PyAV's `Stream.index_entries` (it reads the same tables): it matches these arrays exactly but costs
~30x more per file (a Python object per sample) and has no pts, so ctts and the edit list would still be
parsed here (`benchmarks/library_choices.py`).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import VideoFileError

HEAD_BYTES = 4096  # read first: ftyp and, for faststart files, the start of moov
_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts"}


class IndexUnsupported(Exception):
    """The file's layout is not one this index handles (the caller falls back to plain range reads)."""


@dataclass(frozen=True)
class Mp4Index:
    size: int  # file size in bytes
    pieces: tuple[tuple[int, bytes], ...]  # (offset, bytes) read while indexing: what the demuxer reads at open
    timescale: int  # ticks per second of the video track
    offsets: np.ndarray  # (N,) int64 byte offset of each sample, decode order
    sizes: np.ndarray  # (N,) int64
    dts: np.ndarray  # (N,) int64 ticks, shifted as FFmpeg reports them
    pts: np.ndarray  # (N,) int64 ticks
    durations: np.ndarray  # (N,) int64 ticks
    sync: np.ndarray  # (N,) bool keyframes
    stsd: bytes  # the track's whole `stsd` box (codec, size, decoder configuration): segments copy it

    def cut(self, from_s: float, to_s: float, eps: float = 1e-6) -> tuple[int, int] | None:
        """Samples [first, stop) of an episode [from_s, to_s) in file seconds: from the last keyframe whose
        pts is at or before from_s to before the first later sample whose dts reaches to_s (or the file's
        end). None when no keyframe is at or before from_s."""
        ts = self.timescale
        keys, key_pts, dts_rise = self._search
        if key_pts is not None:  # binary searches: a piece of an hour-long file costs what one of a minute does
            at = int(np.searchsorted(key_pts, (from_s + eps) * ts, side="right"))
            if at == 0:
                return None
            first = int(keys[at - 1])
        else:
            before = np.flatnonzero(self.sync & (self.pts <= (from_s + eps) * ts))
            if len(before) == 0:
                return None
            first = int(before[-1])
        if dts_rise:
            return first, max(first + 1, int(np.searchsorted(self.dts, (to_s - eps) * ts, side="left")))
        later = np.flatnonzero(self.dts[first + 1:] >= (to_s - eps) * ts)
        return first, first + 1 + int(later[0]) if len(later) else len(self.dts)

    @functools.cached_property
    def _search(self) -> tuple[np.ndarray, np.ndarray | None, bool]:
        """What `cut` searches: the keyframes (decode order), their pts when those never decrease (None: `cut`
        scans), and whether dts never decrease (MP4 requires it; else `cut` scans)."""
        keys = np.flatnonzero(self.sync)
        key_pts = self.pts[keys]
        ordered = bool(np.all(np.diff(key_pts) >= 0))
        return keys, key_pts if ordered else None, bool(np.all(np.diff(self.dts) >= 0))

    def gop_bytes(self, t_s: float, eps: float = 1e-6) -> int:
        """Bytes of the GOP holding the frame shown at file time `t_s`: its keyframe (the last at or before the
        frame in decode order) through the sample before the next keyframe (what a reader of that one frame
        cannot do with less of; the bytes read of long episodes are bounded by these)."""
        shown = np.flatnonzero(np.abs(self.pts - t_s * self.timescale) <= eps * self.timescale + 0.5)
        if len(shown) == 0:
            raise ValueError(f"no frame at {t_s:.6f}s")
        keys = np.flatnonzero(self.sync)
        first = int(keys[keys <= shown[0]][-1])
        later = keys[keys > first]
        return int(self.sizes[first:int(later[0]) if len(later) else len(self.sync)].sum())

    def byte_range(self, first: int, stop: int) -> tuple[int, int]:
        """[start, end) bytes holding samples first..stop-1 (one range: a track's samples are in file order)."""
        return int(self.offsets[first:stop].min()), int((self.offsets[first:stop] + self.sizes[first:stop]).max())


def _boxes(buf: bytes, start: int = 0, end: int | None = None):
    """(type, payload start, box end) of the boxes in buf[start:end]."""
    end = len(buf) if end is None else end
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", buf, pos)
        head = 8
        if size == 1:
            size = struct.unpack_from(">Q", buf, pos + 8)[0]
            head = 16
        elif size == 0:
            size = end - pos
        if size < head:
            raise IndexUnsupported(f"box {kind!r} at {pos} has size {size}")
        yield kind, pos + head, min(end, pos + size)
        pos += size


def _find(buf: bytes, start: int, end: int, *path: bytes) -> list[tuple[int, int]]:
    """Payload (start, end) of every box at `path` below buf[start:end]."""
    found = [(start, end)]
    for kind in path:
        found = [(s, e) for ps, pe in found for k, s, e in _boxes(buf, ps, pe) if k == kind]
    return found


def _table(buf: bytes, box: tuple[int, int], fmt: str, fields: int) -> np.ndarray:
    start, _ = box
    count = struct.unpack_from(">I", buf, start + 4)[0]
    arr = np.frombuffer(buf, dtype=np.dtype(fmt), count=count * fields, offset=start + 8)
    return arr.astype(np.int64).reshape(count, fields)


def _track_arrays(moov: bytes) -> tuple:
    if _find(moov, 0, len(moov), b"mvex"):
        raise IndexUnsupported("fragmented MP4 (moov/mvex)")
    for trak in _find(moov, 0, len(moov), b"trak"):
        hdlr = _find(moov, *trak, b"mdia", b"hdlr")
        if not hdlr or moov[hdlr[0][0] + 8:hdlr[0][0] + 12] != b"vide":
            continue
        mdhd = _find(moov, *trak, b"mdia", b"mdhd")[0][0]
        timescale = struct.unpack_from(">I", moov, mdhd + (20 if moov[mdhd] == 1 else 12))[0]
        stbl = _find(moov, *trak, b"mdia", b"minf", b"stbl")[0]

        def box(kind: bytes):
            hit = _find(moov, *stbl, kind)
            return hit[0] if hit else None

        stsz = box(b"stsz")
        fixed, count = struct.unpack_from(">II", moov, stsz[0] + 4)
        sizes = (np.full(count, fixed, np.int64) if fixed else
                 np.frombuffer(moov, ">u4", count, stsz[0] + 12).astype(np.int64))
        stts = _table(moov, box(b"stts"), ">u4", 2)
        deltas = np.repeat(stts[:, 1], stts[:, 0])[:count]
        dts = np.concatenate([[0], np.cumsum(deltas)[:-1]]).astype(np.int64)
        ctts_box = box(b"ctts")
        if ctts_box is not None:
            fmt = ">i4" if moov[ctts_box[0]] == 1 else ">u4"
            ctts = _table(moov, ctts_box, fmt, 2)
            comp = np.repeat(ctts[:, 1], ctts[:, 0])[:count]
        else:
            comp = np.zeros(count, np.int64)
        stss_box = box(b"stss")
        sync = np.ones(count, bool) if stss_box is None else np.zeros(count, bool)
        if stss_box is not None:
            sync[_table(moov, stss_box, ">u4", 1)[:, 0] - 1] = True
        co = box(b"stco") or box(b"co64")
        chunk_offsets = _table(moov, co, ">u4" if box(b"stco") else ">u8", 1)[:, 0]
        stsc = _table(moov, box(b"stsc"), ">u4", 3)  # first_chunk (1-based), samples_per_chunk, desc
        per_chunk = np.zeros(len(chunk_offsets), np.int64)
        for i, (first, n, _) in enumerate(stsc):
            stop = stsc[i + 1][0] - 1 if i + 1 < len(stsc) else len(chunk_offsets)
            per_chunk[first - 1:stop] = n
        chunk_of = np.repeat(np.arange(len(chunk_offsets)), per_chunk)[:count]
        first_in_chunk = np.concatenate([[0], np.cumsum(per_chunk)[:-1]])
        csum = np.concatenate([[0], np.cumsum(sizes)])
        offsets = chunk_offsets[chunk_of] + csum[np.arange(count)] - csum[first_in_chunk[chunk_of]]
        shift = 0
        elst = _find(moov, *trak, b"edts", b"elst")
        if elst:
            version = moov[elst[0][0]]
            entries = struct.unpack_from(">I", moov, elst[0][0] + 4)[0]
            fmt, width = (">Qq", 16) if version == 1 else (">Ii", 8)
            edits = [struct.unpack_from(fmt, moov, elst[0][0] + 8 + k * (width + 4)) for k in range(entries)]
            media = [m for _, m in edits if m >= 0]
            if len(media) != 1:
                raise IndexUnsupported(f"edit list with {entries} entries")
            shift = media[0]
        if len(sizes) != count or len(chunk_of) != count:
            raise IndexUnsupported("sample tables disagree on the sample count")
        stsd_start, stsd_end = box(b"stsd")
        stsd = moov[stsd_start - 8:stsd_end]
        if struct.unpack_from(">I4s", stsd)[1] != b"stsd":
            raise IndexUnsupported("stsd box with a 64-bit size")
        return timescale, offsets.astype(np.int64), sizes, dts - shift, dts + comp - shift, deltas, sync, stsd
    raise IndexUnsupported("no video track")


def track_of(data: bytes) -> tuple:
    """The video track's arrays (as `Mp4Index` holds them, then its `stsd` box) of a whole MP4 in memory."""
    for kind, start, end in _boxes(data):
        if kind == b"moov":
            return _track_arrays(data[start:end])
    raise IndexUnsupported("no moov box")


def read_index(rfs, path: str) -> Mp4Index:
    """Index the video track of the MP4 at `path` on a RemoteFS (a few small range reads + the moov)."""
    size = rfs.size(path)
    head = rfs.read_range(path, 0, min(size, HEAD_BYTES))
    pieces = [(0, head)]
    pos, moov = 0, None
    while pos + 8 <= size:
        if pos + 16 <= len(head):
            header = head[pos:pos + 16]
        else:
            header = rfs.read_range(path, pos, min(size, pos + 16))
            pieces.append((pos, header))
        box_size, kind = struct.unpack_from(">I4s", header, 0)
        if box_size == 1:
            box_size = struct.unpack_from(">Q", header, 8)[0]
        elif box_size == 0:
            box_size = size - pos
        if box_size < 8:
            raise IndexUnsupported(f"box {kind!r} at {pos} has size {box_size}")
        if kind == b"moov":
            end = min(size, pos + box_size)
            moov = head[pos:end] if end <= len(head) else rfs.read_range(path, pos, end)
            pieces.append((pos, moov))
            break
        if kind == b"moof":
            raise IndexUnsupported("fragmented MP4 (moof before moov)")
        pos += box_size
    if moov is None:
        raise IndexUnsupported("no moov box")
    payload = next(_boxes(moov))[1]
    arrays = _track_arrays(moov[payload:])
    pieces = [(p, b) for p, b in pieces if not (p >= len(head) and p + len(b) <= len(head))]
    return Mp4Index(size, tuple(pieces), *arrays)


@dataclass
class IndexedFile:
    """A video file (remote or local) ready for cutting: its index and an open container whose stream is the template."""

    index: Mp4Index
    container: object  # av.container.InputContainer, kept open for `stream`
    stream: object  # av.video.stream.VideoStream


def _close_index(old: Any) -> None:
    """An evicted file's entry: close its template container (None: the file had no usable index)."""
    if old is not None:
        old.container.close()


INDEX_BYTES = 256 << 20  # MP4 indexes kept per store: ~41 bytes a sample (a 1,000-episode file of 300 frames: 12 MB)


def _index_bytes(value: Any) -> int:
    if value is None:
        return 0
    index = value.index
    arrays = (index.offsets, index.sizes, index.dts, index.pts, index.durations, index.sync)
    return sum(a.nbytes for a in arrays) + sum(len(b) for _, b in index.pieces) + len(index.stsd)


class IndexCache:
    """Video files of a RemoteFS, each indexed and opened once even when threads race; the least recently used
    are dropped beyond `capacity_bytes` of index arrays (`INDEX_BYTES`).

    A file whose layout `read_index` does not handle maps to None (why: `unsupported`): its episodes are
    cut through the demuxer and plain range requests."""

    def __init__(self, rfs, capacity_bytes: int = INDEX_BYTES, *, shared: "IndexCache | None" = None) -> None:
        """`shared`: another file system's cache whose bound this one shares (a mixture's members: one
        `capacity_bytes` for all of them, each file kept under its own file system's name)."""
        from .once import OncePerKey

        self.rfs = rfs
        self.files: Any = shared.files if shared is not None else \
            OncePerKey(on_evict=_close_index, capacity_bytes=capacity_bytes, weigh=_index_bytes)
        # path -> why it is read without an index (of every file system sharing the bound)
        self.unsupported: dict[str, str] = shared.unsupported if shared is not None else {}

    def get(self, path: str) -> IndexedFile | None:
        return self.files.get((id(self.rfs), path), lambda: self._open(path))

    def close(self) -> None:
        """Close every template container opened for the indexed files (of every cache sharing the bound)."""
        for value in self.files.clear():
            if value is not None:
                value.container.close()

    def _open(self, path: str) -> IndexedFile | None:
        import av

        try:
            index = read_index(self.rfs, path)
        except (IndexUnsupported, VideoFileError, struct.error, IndexError, ValueError) as exc:
            self.unsupported[path] = f"{type(exc).__name__}: {exc}"
            return None
        try:
            container = av.open(self.rfs.open(path, "rb", pieces=index.pieces), "r")
        except av.error.FFmpegError as exc:  # the demuxing cut reports what is wrong with the file
            self.unsupported[path] = f"{type(exc).__name__}: {exc}"
            return None
        if not container.streams.video:  # a damaged moov: the demuxing cut names the file and the fix
            container.close()
            self.unsupported[path] = "the demuxer finds no video track"
            return None
        stream = container.streams.video[0]
        if stream.time_base != Fraction(1, index.timescale):
            container.close()
            self.unsupported[path] = f"stream time base {stream.time_base} is not 1/{index.timescale}"
            return None
        return IndexedFile(index, container, stream)
