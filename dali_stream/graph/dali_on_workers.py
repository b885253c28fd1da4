"""DALI's CPU decoder on the workers, outside the graph: the pictures of a `dali-cpu` camera (VP8/VP9/MJPEG) as
host arrays, so the decoded-frame cache can keep them (`Resolved.dali_on_workers`). The same decoder with the same
arguments on the same clips as the graph's (`graph.pipeline.video_decoder`, `graph.clips.dali_input`): the same
pixels, which the graph then takes as decoded frames.

A segment's frames asked for in one batch are decoded in runs: frames whose clips would overlap share one clip (a
window's steps, nearby samples), frames further apart than `JOIN_GAP` needless frames get a clip each, as the graph
gives each sample its own. All the runs of a batch's camera go through one pipeline call (a call costs ~1 ms)."""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from ..decode.errors import reason
from ..decode.route import DALI_CPU
from ..fetch.segments import decode_error
from .clips import dali_input, packets_of
from .cpu_pipelines import PipelinePool

# Frames between two asked frames that one clip would decode needlessly and a clip of their own would not, past
# which the later frame starts a clip of its own: a clip costs a demuxer and a decoder opened (~a frame's decode)
JOIN_GAP = 2


def runs(seg, frames: np.ndarray) -> list[np.ndarray]:
    """`frames` (sorted distinct indices into `seg`, presentation order) split where the next frame's keyframe comes
    more than `JOIN_GAP` frames after the frame before it."""
    index = packets_of(seg)
    shown = np.sort(index.pts)
    keys = np.searchsorted(shown, np.sort(index.pts[np.asarray(index.key, bool)]))  # keyframes' positions
    starts = keys[np.maximum(np.searchsorted(keys, frames, side="right") - 1, 0)]  # each frame's clip start
    cut = np.flatnonzero(starts[1:] - frames[:-1] - 1 > JOIN_GAP) + 1
    return np.split(frames, cut)


class DaliFrames:
    """Decodes segments' frames with DALI's CPU decoder through small pipelines, one per thread at a time, kept for
    reuse (`graph.cpu_pipelines`; `close` drops them); `max_clips`: clips a pipeline call takes."""

    def __init__(self, max_clips: int = 64) -> None:
        self.max_clips = max_clips
        self.pipelines = PipelinePool(self._pipeline)
        self._lock = threading.Lock()  # the counts
        self.clips = 0  # clips decoded
        self.frames_fed = 0  # frames the decoder worked through (each clip up to its last frame asked)

    def _pipeline(self):
        from nvidia.dali import fn, types
        from nvidia.dali.pipeline import Pipeline

        from .pipeline import video_decoder

        pipe = Pipeline(batch_size=self.max_clips, num_threads=1, device_id=None, prefetch_queue_depth=1,
                        exec_dynamic=True)
        with pipe:
            encoded = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
            frames = fn.external_source(name="frames", dtype=types.INT32, ndim=1)
            pipe.set_outputs(video_decoder(encoded, frames, DALI_CPU))
        pipe.build()
        return pipe

    def __call__(self, asks: Sequence[tuple[Any, np.ndarray]]) -> list[np.ndarray]:
        """Per (segment, sorted distinct frame indices) of `asks`: its frames, (N, H, W, 3) uint8."""
        clips = []  # (ask, DaliInput)
        for n, (seg, frames) in enumerate(asks):
            clips += [(n, dali_input(seg, run)) for run in runs(seg, np.asarray(frames, np.int64))]
        if not clips:
            return [np.empty((0, 0, 0, 3), np.uint8) for _ in asks]
        with self._lock:
            self.clips += len(clips)
            self.frames_fed += sum(c.frames_fed for _, c in clips)
        parts: list[list[np.ndarray]] = [[] for _ in asks]
        with self.pipelines.take() as pipe:
            for start in range(0, len(clips), self.max_clips):
                part = clips[start:start + self.max_clips]
                pipe.feed_input("encoded", [c.data for _, c in part])
                pipe.feed_input("frames", [c.frames for _, c in part])
                try:
                    (done,) = pipe.run()
                except Exception as exc:
                    raise self._culprit(asks, part, exc) from exc
                for k, (n, _) in enumerate(part):
                    parts[n].append(np.array(done.at(k)))  # copied out: DALI reuses its buffers
        return [p[0] if len(p) == 1 else np.concatenate(p) for p in parts]

    def _culprit(self, asks, part: list, exc: BaseException):
        """The error of a pipeline call that failed, naming the segment whose clip fails alone (`decode_error`)."""
        for n, clip in part if len(part) > 1 else []:
            pipe = self._pipeline()
            pipe.feed_input("encoded", [clip.data])
            pipe.feed_input("frames", [clip.frames])
            try:
                pipe.run()
            except Exception as alone:  # noqa: BLE001 - this clip is the one
                return decode_error(asks[n][0], DALI_CPU.name, RuntimeError(reason(str(alone))))
        return decode_error(asks[part[0][0]][0], DALI_CPU.name, RuntimeError(reason(str(exc))))

    def close(self) -> None:
        self.pipelines.close()
