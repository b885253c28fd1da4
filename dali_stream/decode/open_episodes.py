"""The frames of the pool's open episodes, each camera's segment decoded once front to back (`episode_frames_bytes`):
a camera's RGB frames (torchcodec, DALI's CPU decoder on the workers) or a depth camera's codes (PyAV).

Under a pool (`episode_pool_size` a number) an episode stays open until the plan has drawn every one of its frames,
so every frame of its segments is asked for while it is open. Asked a sample at a time, a frame costs a decode from
the keyframe before it and a call: on the 2-core VM, torchcodec, ~2 ms a frame at 96x128 with GOP 30 against
~0.15 ms a frame decoded front to back (13-15x); 4.3-4.5 against 0.35-0.48 ms at 256x256 AV1 (9-12x). So a
segment asked again is decoded whole, in one call, and its frames are held while the episode stays open: released with its decoders when the plan retires it (`fetch.store`'s `unpin`, through `Released`), bounded in
bytes. A segment is held only where its frames take at most its share of the bound (the loader's: the bound over
the pool's episodes and cameras, `loader.resolve`), so the first episodes admitted never take the room of the rest;
a larger one (480p: 0.9 MB a frame), or one that would not fit beside those held, is decoded per sample, as without
this.

Not by the first batch that asks for it: that batch decodes the frames it shows, per sample, and the next batch
asking decodes the segment whole. An epoch's first batch draws from every episode of the pool at once (16 episodes,
two cameras: 32 segments); decoded whole there, it took 3.6-4.0 s on a LIBERO-shaped dataset (two 256x256 AV1
cameras) against ~0.2 s per sample. The next batches pay the whole decodes, shared by the builder threads, as
before; each episode pays one sample's decode more than before, once (~1 % of an epoch there).

Threads that ask for a segment another thread is decoding wait for it (its decode is one call); should that decode
fail, they decode per sample and say the error themselves. A piece of a long episode (`Segment.piece`) serves one
batch and is never held. What the caller does with the frames is as without this: the same pixels (the same
decoder on the same segment), each frame's time checked by the decoder's own call."""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np


class EpisodeFrames:
    """Decoded segments by `Segment.uid`: (N, H, W, 3) uint8, every frame of the segment, at most `bound_bytes` of
    them held at once, each segment at most `each_bytes` (None: the bound)."""

    def __init__(self, bound_bytes: int, each_bytes: int | None = None) -> None:
        self.bound_bytes = int(bound_bytes)
        self.each_bytes = self.bound_bytes if each_bytes is None else int(each_bytes)
        self._lock = threading.Lock()
        self._held: dict[int, np.ndarray] = {}
        self._busy: dict[int, threading.Event] = {}  # uid -> set once its decode ended (kept, or failed)
        self._dropped: set[int] = set()  # released while decoding: not kept when the decode ends
        self.bytes = 0  # held, and reserved by decodes in flight
        self.peak = 0
        self.segments = 0  # segments decoded whole
        self.frames = 0  # their frames
        self.refused = 0  # asks for a segment that did not fit (decoded per sample)
        self._first: dict[int, int] = {}  # uid -> the first batch that asked for it (`take`'s `batch`)
        self.first_asks = 0  # asks by a segment's first batch (decoded per sample)

    def take(self, segs: Sequence[Any], decode_all: Callable[[list], list[np.ndarray]],
             pixel_bytes: int = 3, batch: int | None = None) -> dict[int, np.ndarray]:
        """uid -> every frame of the segment, for those of `segs` held or decoded now (`decode_all(segments)`: each
        one's frames in presentation order; `pixel_bytes`: what a pixel of them takes, 3 for RGB, 2 for a depth
        camera's codes); the others (larger than `each_bytes`, no room, a piece, a decode that failed on another
        thread, or asked by their first batch) are not in it. `batch`: the asking batch's index; a segment is
        decoded whole only when a batch after the first that asked for it asks again (None: at once). The caller
        indexes the frames it needs; the arrays are not to be written.

        Segments are claimed one at a time, each decoded alone: builders of other batches asking for the same
        segments meanwhile claim the next ones (a pool's episodes decode on every builder thread), then wait for
        those claimed elsewhere."""
        out: dict[int, np.ndarray] = {}
        waits: list[tuple[Any, threading.Event]] = []
        asked: set[int] = set()
        for seg in segs:
            if seg.uid in asked or seg.piece:
                continue
            asked.add(seg.uid)
            with self._lock:
                held = self._held.get(seg.uid)
                if held is not None:
                    out[seg.uid] = held
                    continue
                if seg.uid in self._busy:
                    waits.append((seg, self._busy[seg.uid]))
                    continue
                if batch is not None and self._first.setdefault(seg.uid, batch) >= batch:
                    self._first[seg.uid] = batch
                    self.first_asks += 1
                    continue
                need = _bytes(seg, pixel_bytes)
                if need is None or need > self.each_bytes or self.bytes + need > self.bound_bytes:
                    self.refused += 1
                    continue
                self.bytes += need
                self.peak = max(self.peak, self.bytes)
                self._busy[seg.uid] = threading.Event()
            try:
                decoded = decode_all([seg])
            except BaseException:
                self._end([(seg, need)], None)
                raise
            out.update(self._end([(seg, need)], decoded))
        for seg, event in waits:
            event.wait()
            with self._lock:
                held = self._held.get(seg.uid)
            if held is not None:
                out[seg.uid] = held
        return out

    def _end(self, mine: list[tuple[Any, int]], decoded: list[np.ndarray] | None) -> dict[int, np.ndarray]:
        """Keep what this thread decoded (None: its decode failed) and wake whoever waits for it."""
        kept: dict[int, np.ndarray] = {}
        with self._lock:
            for n, (seg, need) in enumerate(mine):
                frames = None if decoded is None else decoded[n]
                if frames is not None and seg.uid not in self._dropped:
                    frames.flags.writeable = False  # shared by every batch that draws the episode
                    self._held[seg.uid] = frames
                    self.bytes += frames.nbytes - need
                    self.segments += 1
                    self.frames += len(frames)
                    kept[seg.uid] = frames
                else:
                    self.bytes -= need
                self._dropped.discard(seg.uid)
                self._busy.pop(seg.uid).set()
            self.peak = max(self.peak, self.bytes)
        return kept

    def release(self, seg: Any) -> None:
        """Drop the frames of `seg` (its episode left the pool); one being decoded is dropped when it ends."""
        with self._lock:
            self._first.pop(seg.uid, None)
            held = self._held.pop(seg.uid, None)
            if held is not None:
                self.bytes -= held.nbytes
            elif seg.uid in self._busy:
                self._dropped.add(seg.uid)

    def clear(self) -> None:
        """Drop every segment's frames (the loader is closing)."""
        with self._lock:
            for uid in self._held:
                self._dropped.discard(uid)
            self.bytes -= sum(f.nbytes for f in self._held.values())
            self._held.clear()
            self._first.clear()
            self._dropped.update(self._busy)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"held": self.bytes, "bound": self.bound_bytes, "each": self.each_bytes, "peak": self.peak, "segments": len(self._held),
                    "decoded_segments": self.segments, "decoded_frames": self.frames, "refused": self.refused,
                    "first_asks": self.first_asks}


class AskedBy:
    """`EpisodeFrames.take` as one batch asks (`batch`: its index in its epoch; None: a segment asked is decoded
    whole at once)."""

    def __init__(self, frames: EpisodeFrames, batch: int | None) -> None:
        self.frames, self.batch = frames, batch

    def take(self, segs: Sequence[Any], decode_all: Callable[[list], list[np.ndarray]],
             pixel_bytes: int = 3) -> dict[int, np.ndarray]:
        return self.frames.take(segs, decode_all, pixel_bytes, self.batch)


def asked_by(frames: EpisodeFrames | None, plan: Any) -> AskedBy | None:
    """`frames` as the batch of `plan` (`plan.epoch.BatchPlan`; None: no batch, decoded whole at once) asks for them
    (None: no open episodes' frames)."""
    return None if frames is None else AskedBy(frames, None if plan is None else plan.index)


def _bytes(seg: Any, pixel_bytes: int) -> int | None:
    """What every frame of `seg` takes decoded, from its sample entry's size (None: not stated there)."""
    size = seg.size()
    return None if size is None else len(seg.pts_s) * size[0] * size[1] * pixel_bytes


class Released:
    """What the store releases a retired episode's segments through (`fetch.store.SegmentDecoders`): the CPU decoders
    kept for them and, where held, their decoded frames."""

    def __init__(self, *owners: Any) -> None:
        self.owners = [o for o in owners if o is not None]

    def release(self, seg: Any) -> None:
        for owner in self.owners:
            owner.release(seg)

    def clear(self) -> None:
        for owner in self.owners:
            owner.clear()
