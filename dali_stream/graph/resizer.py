"""DALI's resize on the CPU outside the graph: a camera's frames resized on the workers before the decoded-frame
cache keeps them (`Resolved.resized_on_workers`), so the cache holds them at their output size and later epochs do
not resize again. The same operator with the same arguments as the graph's (`graph.pipeline`): on the CPU, the
same pixels (a frame resized alone or in its sample's sequence is resized alike)."""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np


class Resizer:
    """Frames (H, W, 3) uint8 to `size` (H, W), through small CPU pipelines made on first use, one per thread
    resizing at a time, kept for reuse (`close` drops them)."""

    def __init__(self, size: tuple[int, int], max_frames: int = 64) -> None:
        self.size = (int(size[0]), int(size[1]))
        self.max_frames = max_frames
        self._free: list[Any] = []
        self._lock = threading.Lock()

    def _pipeline(self):
        from nvidia.dali import fn, types
        from nvidia.dali.pipeline import Pipeline

        pipe = Pipeline(batch_size=self.max_frames, num_threads=1, device_id=None, prefetch_queue_depth=1,
                        exec_dynamic=True)
        with pipe:
            frames = fn.external_source(name="frames", layout="HWC", dtype=types.UINT8, ndim=3)
            pipe.set_outputs(fn.resize(frames, size=list(self.size), antialias=True))
        pipe.build()
        return pipe

    def __call__(self, frames: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """`frames` resized: (N, h, w, 3) uint8, an array of its own."""
        with self._lock:
            pipe = self._free.pop() if self._free else None
        if pipe is None:
            pipe = self._pipeline()
        try:
            out = np.empty((len(frames), *self.size, 3), np.uint8)
            for start in range(0, len(frames), self.max_frames):
                part = [np.ascontiguousarray(f) for f in frames[start:start + self.max_frames]]
                pipe.feed_input("frames", part)
                (resized,) = pipe.run()
                for n in range(len(part)):
                    out[start + n] = np.asarray(resized.at(n))  # copied out: DALI reuses its buffers
            return out
        finally:
            with self._lock:
                self._free.append(pipe)

    def close(self) -> None:
        with self._lock:
            self._free.clear()
