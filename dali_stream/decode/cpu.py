"""The CPU decoder: torchcodec on the builders' threads, with idle decoders kept for reuse (bounded).

Every decoded frame's presentation time is checked against the planned frame's (`check_frame_times`): a
frame from another place in the stream raises `WrongFrameError` instead of reaching training. The cost is one
comparison a frame (torchcodec returns the times with the frames)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ..errors import ConfigError, WrongFrameError
from ..fetch.segments import Segment, decode_error
from ..pairing import minor_of
from .route import TORCHCODEC


def open_decoder(data: bytes):
    """The torchcodec decoder every CPU decode uses (loader, benchmarks): exact seeking, NHWC frames."""
    from torchcodec.decoders import VideoDecoder

    return VideoDecoder(data, seek_mode="exact", dimension_order="NHWC")


class DecoderCache:
    """Idle torchcodec decoders of segments, reused across batches, at most `capacity` of them alive.

    A thread takes an idle decoder of the segment (or opens one) and gives it back after decoding, so threads
    decoding the same segment run in parallel (torchcodec releases the GIL; one decoder must not be used by two
    threads at once). Beyond `capacity` idle decoders the least recently used one is closed: an AV1 decoder
    holds ~12 MB at 480p, so without a bound they would scale as pool x cameras x threads. Alive at once: at
    most `capacity` idle ones plus one per thread decoding. `capacity=None`: unbounded (the benchmark's warm
    decode limit)."""

    def __init__(self, capacity: int | None, check_frames: bool = True) -> None:
        if capacity is not None and (not isinstance(capacity, int) or capacity < 1):
            raise ConfigError(f"`max_decoders` must be a positive integer. Found: {capacity!r}")
        self.capacity = capacity
        self.check_frames = check_frames  # compare each frame's time with the planned one (`check_frame_times`)
        self._lock = threading.Lock()
        self._idle: OrderedDict[int, tuple[Segment, object]] = OrderedDict()  # id(decoder) -> (segment, decoder)
        # Segment.uid -> ids of its idle decoders. Not id(segment): a segment given back after its episode was
        # released and evicted could leave its id to a new segment of another stream.
        self._of: dict[int, list[int]] = {}
        self.busy = 0  # decoders in use right now
        self.opened = 0  # decoders opened so far
        self.closed = 0  # idle decoders closed to stay within capacity
        self.peak = 0  # most decoders alive at once (idle + busy)

    @property
    def alive(self) -> int:
        return len(self._idle) + self.busy

    @property
    def idle(self) -> int:
        """Decoders kept open for reuse, none of them decoding now."""
        return len(self._idle)

    def take(self, seg: Segment):
        """An idle decoder of `seg`, or None (the caller opens one); either way the caller now holds one."""
        with self._lock:
            self.busy += 1
            ids = self._of.get(seg.uid)
            if ids:
                return self._idle.pop(ids.pop())[1]
            self.opened += 1
            self.peak = max(self.peak, self.alive)
            return None

    def give(self, seg: Segment, decoder) -> None:
        """Give back a decoder taken for `seg` (None: it failed and is dropped)."""
        with self._lock:
            self.busy -= 1
            if decoder is not None and not seg.piece:  # a piece serves one batch: nothing reuses it
                self._keep(seg, decoder)

    def add(self, seg: Segment, decoder) -> None:
        """Keep a decoder opened for `seg` outside `take` (warming a cache before timing)."""
        with self._lock:
            self.opened += 1
            self._keep(seg, decoder)
            self.peak = max(self.peak, self.alive)

    def _keep(self, seg: Segment, decoder) -> None:
        """(lock held) `decoder` joins the idle ones; the least recently used beyond capacity are closed."""
        self._idle[id(decoder)] = (seg, decoder)
        self._of.setdefault(seg.uid, []).append(id(decoder))
        while self.capacity is not None and len(self._idle) > self.capacity:
            key, (old, _) = self._idle.popitem(last=False)
            self._forget(old, key)
            self.closed += 1

    def _forget(self, seg: Segment, key: int) -> None:
        ids = self._of[seg.uid]
        ids.remove(key)
        if not ids:
            del self._of[seg.uid]

    def release(self, seg: Segment) -> None:
        """Close the idle decoders of `seg` (it left the pool: FFmpeg contexts are not counted in cache_bytes)."""
        with self._lock:
            for key in self._of.pop(seg.uid, []):
                self._idle.pop(key, None)

    def clear(self) -> None:
        """Close every idle decoder (the loader is closing)."""
        with self._lock:
            self._idle.clear()
            self._of.clear()

    def idle_of(self, seg: Segment) -> int:
        with self._lock:
            return len(self._of.get(seg.uid, []))


def torchcodec_frames(seg: Segment, indices: np.ndarray, cache: DecoderCache | None = None) -> np.ndarray:
    """Frames `indices` of the segment as (N, H, W, 3) uint8, through a decoder from `cache` (None: a decoder
    opened for this call alone, as one-off tools such as diagnose want)."""
    return torchcodec_tensor(seg, indices, cache).numpy()


def torchcodec_tensor(seg: Segment, indices: np.ndarray, cache: DecoderCache | None = None):
    """`torchcodec_frames` as the torch tensor torchcodec returns (N, H, W, 3) uint8, each frame's time checked
    (`check_frame_times`) unless `cache` says not to."""
    decoder = cache.take(seg) if cache is not None else None
    try:
        if decoder is None:
            decoder = open_decoder(seg.data)
        if seg.origin_s is None:
            seg.origin_s = float(decoder.metadata.begin_stream_seconds_from_content)
        batch = decoder.get_frames_at(indices=[int(i) for i in indices])
    except Exception as exc:
        if cache is not None:
            cache.give(seg, None)
        raise decode_error(seg, TORCHCODEC.name, exc) from exc
    if cache is not None:
        cache.give(seg, decoder)
    if cache is None or cache.check_frames:
        check_frame_times(seg, indices, batch.pts_seconds.numpy(), TORCHCODEC.name)
    return batch.data


def check_frame_times(seg: Segment, indices: np.ndarray, got_s: np.ndarray, route: str) -> None:
    """Raise WrongFrameError unless frame k of `indices` was shown at the segment's planned time `pts_s[k]`.

    `got_s` are the decoder's presentation times; a decoder counts time from the segment's first frame at
    `seg.origin_s` (a cut from the index starts at 0, a demuxing cut keeps the file's times). A time more than
    half a frame gap from the planned one is another frame."""
    indices = np.asarray(indices, dtype=np.int64)
    want = seg.pts_s[indices] - seg.pts_s[0]
    got = np.asarray(got_s, dtype=np.float64) - (seg.origin_s or 0.0)
    off = np.abs(got - want) > seg.half_gap_s
    if off.any():
        k = int(np.flatnonzero(off)[0])
        raise WrongFrameError(
            f"{route} returned the frame shown at {got[k]:.6f}s into the segment of episode {seg.episode}, camera "
            f"{seg.camera!r} ({seg.codec}, cut from {seg.source}) for frame {int(indices[k])}, planned at "
            f"{want[k]:.6f}s (file time {seg.pts_s[indices[k]]:.6f}s); {int(off.sum())} of {len(indices)} frames "
            "of that call were off. The decoder handed back another frame than the one asked for: a damaged "
            "file (`dali-stream verify DATASET --decode` lists it), else a bug in dali_stream or the decoder. "
            + (misread_hint(seg.codec, seg.camera, _torchcodec_version()) if route == TORCHCODEC.name else "")
            + "Where verify finds the files healthy, please report it with its output; check_frames=False turns "
            "this check off (the wrong frames then reach training silently)")


# torchcodec versions seen to return other frames than asked for, by codec: (below this version, what was seen)
MISREADS = {"hevc": ((0, 13), "torchcodec 0.11.1 with FFmpeg 7.1 or 8 returned the frame shown at 2.2 s for frame 5 "
                              "(0.17 s) of lerobot-recorded HEVC (GOP 2), where it read every frame right with FFmpeg "
                              "5.1, and torchcodec 0.13 with FFmpeg 8 did too")}


def misread_hint(codec: str, camera: str, version: str | None) -> str:
    """What is known of this torchcodec `version` misreading `codec`, and the way out for `camera` ("" where nothing
    is known)."""
    known = MISREADS.get(codec)
    if known is None or version is None:
        return ""
    below, seen = known
    minor = minor_of(version)
    if minor is not None and minor >= below:
        return ""
    return (f"This torchcodec is {version}: {seen}; upgrade torchcodec (>= {'.'.join(map(str, below))}, with its "
            f"matching torch), or decode the camera with FFmpeg's own decoders through PyAV, decode={{{camera!r}: "
            "'cpu-open'}. ")


def _torchcodec_version() -> str | None:
    import importlib.metadata as md

    try:
        return md.version("torchcodec")
    except md.PackageNotFoundError:
        return None


def warm_decoders(seg: Segment, count: int, cache: DecoderCache) -> None:
    """Open idle torchcodec decoders of the segment until `cache` holds `count` (benchmarks time decode alone)."""
    for _ in range(count - cache.idle_of(seg)):
        cache.add(seg, open_decoder(seg.data))
