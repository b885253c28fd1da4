"""The sample index of an MP4 (its `moov` box), so an episode costs one range read for its packets.

`read_index(rfs, path)` walks the file's top-level boxes with small range reads (the first 4 KB, one
16-byte header per later box, then the whole `moov`) and parses the video track's sample tables
(stts/ctts/stss/stsz/stsc/stco|co64, mdhd timescale, elst shift; `mp4boxes`) into per-sample offset, size, dts,
pts, duration and keyframe flag, exactly as FFmpeg's mov demuxer reports them (tests compare every packet of
H.264 with B-frames, HEVC, AV1 and VP9 files). `Mp4Index.cut(from_s, to_s)` names the samples an
episode's segment holds: the same rule as the demuxing cut in `segments`, so `segments.cut_segment` can
build the segment from one range request without opening a demuxer per episode.

`IndexCache` keeps each file's index, checked once against FFmpeg's reading of the same bytes (a container
opened over them and closed), within a bound of bytes, least recently used first out.

Unsupported layouts (fragmented MP4, no video track, several edits) raise `IndexUnsupported`; the caller
then cuts through the demuxer and plain range requests. A damaged file (its boxes contradicting themselves or its
length, checked before anything of a stated size is allocated: `mp4boxes`) raises `errors.DamagedVideoError`
naming the file and the box.

Why not PyAV's `Stream.index_entries` (it reads the same tables): it matches these arrays exactly but costs
~30x more per file (a Python object per sample) and has no pts, so ctts and the edit list would still be
parsed here (`benchmarks/library_choices.py`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .mp4boxes import Damaged, IndexUnsupported, box_name, boxes, track_arrays, track_of

__all__ = ["Damaged", "IndexUnsupported", "Mp4Index", "Span", "read_index", "track_of"]

HEAD_BYTES = 4096  # read first: ftyp and, for faststart files, the start of moov


CHECKPOINT = 256  # samples: an offset is kept at least this often, so a span's offsets sum few sizes


def _small(values: np.ndarray) -> np.ndarray:
    """`values` (integers) in the smallest signed integer type that holds them exactly."""
    if len(values) == 0:
        return values.astype(np.int8)
    low, high = int(values.min()), int(values.max())
    for kind in (np.int8, np.int16, np.int32):
        info = np.iinfo(kind)
        if info.min <= low and high <= info.max:
            return values.astype(kind)
    return values.astype(np.int64)


@dataclass(frozen=True)
class Span:
    """Samples [first, stop) of an index, each array (stop - first,) in int64 (`sync` bool), decode order."""

    offsets: np.ndarray  # byte offset of each sample in the file
    sizes: np.ndarray
    dts: np.ndarray  # ticks, shifted as FFmpeg reports them
    pts: np.ndarray
    durations: np.ndarray
    sync: np.ndarray  # keyframes


@dataclass(frozen=True)
class Mp4Index:
    """A video track's samples in few bytes each (`benchmarks/index_memory.py`): sizes as 32-bit numbers, offsets
    kept only where the samples stop following one another in the file (and every CHECKPOINT samples), decode
    times as a first time and a constant step (or each step in the smallest type, with the time itself every
    CHECKPOINT samples), presentation offsets (ctts) in the smallest type that holds them, keyframes as a sorted
    list. `span(first, stop)` gives any run of samples' arrays and `cut` finds an episode's samples by binary
    searches over those; the whole-track properties (`offsets`, `pts`, ...) build every sample's (tests, tools:
    O(samples))."""

    size: int  # file size in bytes
    pieces: tuple[tuple[int, bytes], ...]  # (offset, bytes) read while indexing: what the demuxer reads at open
    timescale: int  # ticks per second of the video track
    count: int  # samples
    sample_sizes: np.ndarray  # (N,) uint32
    run_first: np.ndarray  # (R,) int64 sorted: samples where a run of back-to-back samples begins
    run_offset: np.ndarray  # (R,) int64 their byte offsets
    dts_first: int
    dts_step: int  # the constant decode step in ticks; 0: the steps vary (`dts_steps`)
    dts_steps: np.ndarray | None  # (N - 1,) each sample's step to the next, smallest type, where they vary
    dts_marks: np.ndarray | None  # (ceil(N / CHECKPOINT),) int64 decode time of every CHECKPOINT-th sample, idem
    last_duration: int  # the last sample's duration (the others are the decode steps)
    durations_all: np.ndarray | None  # (N,) durations where they are not the decode steps, else None
    comp: np.ndarray | None  # (N,) pts - dts in the smallest type, None: pts == dts
    keys: np.ndarray  # (K,) int32 keyframes in decode order
    keys_ordered: bool  # keyframes' pts never decrease (every real encoder's): `cut` searches, else scans
    dts_rise: bool  # decode times never decrease (MP4 requires it): `cut` searches, else scans
    stsd: bytes  # the track's whole `stsd` box (codec, size, decoder configuration): segments copy it

    @classmethod
    def of(cls, size: int, pieces: tuple, timescale: int, offsets: np.ndarray, sizes: np.ndarray, dts: np.ndarray,
           pts: np.ndarray, durations: np.ndarray, sync: np.ndarray, stsd: bytes) -> "Mp4Index":
        """The compact index of a track's per-sample arrays (as `track_of` gives them)."""
        n = len(sizes)
        offsets, sizes = np.asarray(offsets, np.int64), np.asarray(sizes, np.int64)
        dts, pts, durations = (np.asarray(a, np.int64) for a in (dts, pts, durations))
        breaks = np.ones(n, bool)
        if n > 1:
            breaks[1:] = offsets[1:] != offsets[:-1] + sizes[:-1]
        breaks[::CHECKPOINT] = True
        run_first = np.flatnonzero(breaks).astype(np.int64)
        steps = np.diff(dts)
        step = int(steps[0]) if len(steps) and steps[0] > 0 and np.all(steps == steps[0]) else 0
        if n == 1:
            step = max(1, int(durations[0]))
        comp = pts - dts
        keys = np.flatnonzero(sync).astype(np.int32)
        return cls(size, pieces, timescale, n, sizes.astype(np.uint32), run_first, offsets[run_first],
                   int(dts[0]) if n else 0, step, None if step else _small(steps),
                   None if step else dts[::CHECKPOINT].copy(), int(durations[-1]) if n else 0,
                   None if np.array_equal(durations[:-1], steps) else durations,
                   _small(comp) if comp.any() else None, keys, bool(np.all(np.diff(pts[keys]) >= 0)),
                   bool(np.all(steps >= 0)), stsd)

    def _dts(self, first: int, stop: int) -> np.ndarray:
        if self.dts_step:
            return self.dts_first + np.arange(first, stop, dtype=np.int64) * self.dts_step
        assert self.dts_steps is not None and self.dts_marks is not None
        mark = first // CHECKPOINT * CHECKPOINT
        run = np.concatenate([[0], np.cumsum(self.dts_steps[mark:max(mark, stop - 1)], dtype=np.int64)])
        return int(self.dts_marks[first // CHECKPOINT]) + run[first - mark:stop - mark]

    def dts_at(self, i: int) -> int:
        if self.dts_step:  # plain integers: `cut`'s binary searches call this a dozen times
            return self.dts_first + i * self.dts_step
        assert self.dts_steps is not None and self.dts_marks is not None
        mark = i // CHECKPOINT
        return int(self.dts_marks[mark]) + int(self.dts_steps[mark * CHECKPOINT:i].sum(dtype=np.int64))

    def pts_at(self, i: int) -> int:
        """Sample `i`'s presentation time in ticks."""
        return self.dts_at(i) + (int(self.comp[i]) if self.comp is not None else 0)

    def _offsets(self, first: int, stop: int, sizes: np.ndarray) -> np.ndarray:
        """Samples [first, stop)'s byte offsets (`sizes`: theirs, int64): each run's first offset plus the sizes
        of the run's samples before it."""
        run = max(0, int(np.searchsorted(self.run_first, first, side="right")) - 1)
        start = int(self.run_first[run])
        before = np.cumsum(self.sample_sizes[start:stop], dtype=np.int64)
        before -= self.sample_sizes[start:stop]  # sizes of the samples before each, from the run's start
        last = int(np.searchsorted(self.run_first, stop, side="left"))  # runs that begin before stop
        if last - run <= 1:  # one run (the usual case): no run restarts inside the span
            return int(self.run_offset[run]) + before[first - start:]
        at = np.arange(first, stop)
        runs = np.searchsorted(self.run_first, at, side="right") - 1
        return self.run_offset[runs] + before[at - start] - before[self.run_first[runs] - start]

    def span(self, first: int, stop: int) -> Span:
        """Samples [first, stop)'s arrays (see `Span`)."""
        first, stop = max(0, int(first)), min(self.count, int(stop))
        stop = max(first, stop)
        n = stop - first
        sizes = self.sample_sizes[first:stop].astype(np.int64)
        offsets = self._offsets(first, stop, sizes) if n else np.zeros(0, np.int64)
        dts = self._dts(first, stop)
        pts = dts + self.comp[first:stop] if self.comp is not None else dts.copy()
        if self.durations_all is not None:
            durations = self.durations_all[first:stop]
        elif self.dts_step:
            durations = np.full(n, self.dts_step, np.int64)
        else:
            durations = np.zeros(n, np.int64)
            steps = self.dts_steps[first:min(stop, self.count - 1)]  # type: ignore[index]
            durations[:len(steps)] = steps
        if stop == self.count and n and self.durations_all is None:
            durations[-1] = self.last_duration
        sync = np.zeros(n, bool)
        k0, k1 = np.searchsorted(self.keys, (first, stop))
        sync[self.keys[k0:k1] - first] = True
        return Span(offsets, sizes, dts, pts, durations, sync)

    @property
    def whole(self) -> Span:
        return self.span(0, self.count)

    offsets = property(lambda self: self.whole.offsets)
    sizes = property(lambda self: self.whole.sizes)
    dts = property(lambda self: self.whole.dts)
    pts = property(lambda self: self.whole.pts)
    durations = property(lambda self: self.whole.durations)
    sync = property(lambda self: self.whole.sync)

    @property
    def frame_rate(self) -> float | None:
        """Frames a second of the track by its decode times: the mean step from the first sample to the last (times
        rounded to milliseconds make 30 fps steps of 33 and 34 ms, whose median says 30.3); None with fewer than two
        samples."""
        if self.count < 2:
            return None
        span = self.dts_at(self.count - 1) - self.dts_first
        return self.timescale * (self.count - 1) / span if span > 0 else None

    @property
    def nbytes(self) -> int:
        """Bytes the index's arrays hold (what `IndexCache`'s bound weighs, with `stsd` and any `pieces`)."""
        arrays = (self.sample_sizes, self.run_first, self.run_offset, self.dts_steps, self.dts_marks,
                  self.durations_all, self.comp, self.keys)
        return sum(a.nbytes for a in arrays if a is not None)

    def cut(self, from_s: float, to_s: float, eps: float = 1e-6) -> tuple[int, int] | None:
        """Samples [first, stop) of an episode [from_s, to_s) in file seconds: from the last keyframe whose
        pts is at or before from_s to before the first later sample whose dts reaches to_s (or the file's
        end). None when no keyframe is at or before from_s. Binary searches over the compact arrays: a piece of
        an hour-long file costs what one of a minute does."""
        ts = self.timescale
        start = (from_s + eps) * ts
        if self.keys_ordered:  # the last keyframe whose pts <= start
            low, high = 0, len(self.keys)
            while low < high:
                mid = (low + high) // 2
                if self.pts_at(int(self.keys[mid])) <= start:
                    low = mid + 1
                else:
                    high = mid
            if low == 0:
                return None
            first = int(self.keys[low - 1])
        else:
            whole = self.whole
            before = np.flatnonzero(whole.sync & (whole.pts <= start))
            if len(before) == 0:
                return None
            first = int(before[-1])
        limit = (to_s - eps) * ts
        if self.dts_step:  # dts = first + i * step: the first sample whose dts reaches the limit, by arithmetic
            reach = int(np.ceil((limit - self.dts_first) / self.dts_step))
            return first, max(first + 1, min(self.count, max(0, reach)))
        if self.dts_rise:  # the first sample whose dts >= limit
            low, high = first + 1, self.count
            while low < high:
                mid = (low + high) // 2
                if self.dts_at(mid) < limit:
                    low = mid + 1
                else:
                    high = mid
            return first, max(first + 1, low)
        later = np.flatnonzero(self._dts(first + 1, self.count) >= limit)
        return first, first + 1 + int(later[0]) if len(later) else self.count

    def gop_bytes(self, t_s: float, eps: float = 1e-6) -> int:
        """Bytes of the GOP holding the frame shown at file time `t_s`: its keyframe (the last at or before the
        frame in decode order) through the sample before the next keyframe (what a reader of that one frame
        cannot do with less of; the bytes read of long episodes are bounded by these)."""
        tick = t_s * self.timescale
        lo, hi = 0, self.count
        if self.dts_step:  # only the samples whose dts lies within the largest presentation offset of the time
            reach = (int(np.abs(self.comp).max()) if self.comp is not None else 0) // self.dts_step + 2
            near = int((tick - self.dts_first) // self.dts_step)
            lo, hi = max(0, near - reach), min(self.count, near + reach + 1)
        shown = lo + np.flatnonzero(np.abs(self.span(lo, hi).pts - tick) <= eps * self.timescale + 0.5)
        if len(shown) == 0:
            raise ValueError(f"no frame at {t_s:.6f}s")
        keys = self.keys.astype(np.int64)
        first = int(keys[keys <= shown[0]][-1])
        later = keys[keys > first]
        return int(self.sample_sizes[first:int(later[0]) if len(later) else self.count].sum(dtype=np.int64))

    def byte_range(self, first: int, stop: int) -> tuple[int, int]:
        """[start, end) bytes holding samples first..stop-1 (one range: a track's samples are in file order)."""
        run = max(0, int(np.searchsorted(self.run_first, first, side="right")) - 1)
        start = int(self.run_first[run])
        if run + 1 == len(self.run_first) or int(self.run_first[run + 1]) >= stop:  # back to back: one sum each
            before = int(self.sample_sizes[start:first].sum(dtype=np.int64))
            at = int(self.run_offset[run]) + before
            return at, at + int(self.sample_sizes[first:stop].sum(dtype=np.int64))
        sizes = self.sample_sizes[first:stop].astype(np.int64)
        offsets = self._offsets(first, stop, sizes)
        return int(offsets.min()), int((offsets + sizes).max())


LFS_MAGIC = b"version https://git-lfs"  # the first bytes of a Git LFS pointer file
FIX = ("re-download it (or re-encode it from its source); `dali-stream verify DATASET` lists every damaged file of "
       "the dataset")


def read_index(rfs, path: str) -> Mp4Index:
    """Index the video track of the MP4 at `path` on a RemoteFS (a few small range reads + the moov). A file whose
    boxes contradict themselves or its length raises `DamagedVideoError` naming the file and the box."""
    from ..errors import DamagedVideoError

    try:
        return _read_index(rfs, path)
    except Damaged as exc:
        raise DamagedVideoError(f"video file {path} is damaged ({exc.part} box: {exc.why}); {FIX}", path,
                                exc.part) from None


def _read_index(rfs, path: str) -> Mp4Index:
    size = rfs.size(path)
    head = rfs.read_range(path, 0, min(size, HEAD_BYTES))
    if head.startswith(LFS_MAGIC):
        from ..errors import DamagedVideoError

        raise DamagedVideoError(f"video file {path} is a Git LFS pointer, not video: run `git lfs pull` in the "
                                "dataset, or download it with huggingface_hub instead of git clone", path, "file")
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
            if len(header) < 16:
                raise Damaged(box_name(kind), f"its 64-bit size lies past the file's end ({size} bytes)")
            box_size = struct.unpack_from(">Q", header, 8)[0]
        elif box_size == 0:
            box_size = size - pos
        if box_size < 8:
            raise Damaged(box_name(kind), f"at byte {pos} declares {box_size} bytes, less than its own header")
        if pos + box_size > size:
            raise Damaged(box_name(kind), f"at byte {pos} declares {box_size} bytes; the file ends {size - pos} bytes "
                                       "later: it is truncated or the size damaged")
        if kind == b"moov":
            end = pos + box_size
            moov = head[pos:end] if end <= len(head) else rfs.read_range(path, pos, end)
            pieces.append((pos, moov))
            break
        if kind == b"moof":
            raise IndexUnsupported("fragmented MP4 (moof before moov)")
        pos += box_size
    if moov is None:
        if head[4:8] == b"ftyp":  # an MP4 (fragmented ones too) always has one: the file ends before it
            raise Damaged("moov", f"missing: the top-level boxes end at byte {pos} of {size} without one (a file "
                                  "truncated before its index)")
        raise IndexUnsupported("no moov box")
    payload = next(boxes(moov))[1]
    arrays = track_arrays(moov[payload:], size)
    pieces = [(p, b) for p, b in pieces if not (p >= len(head) and p + len(b) <= len(head))]
    return Mp4Index.of(size, tuple(pieces), *arrays)
