"""DALI's resize and centre crop on the CPU outside the graph: a camera's frames brought to the batch's size on the
workers before the decoded-frame cache keeps them (`Resolved.shaped_on_workers`), so the cache holds them at their
output size and later epochs neither resize nor crop again. The same operators with the same arguments as the
graph's (`graph.pipeline`: `fn.resize(..., antialias=True)`, then the crop `crop_mirror_normalize` takes, which
`fn.crop` cuts alike): on the CPU, the same pixels (a frame resized alone or in its sample's sequence is resized
alike)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .cpu_pipelines import PipelinePool


class Resizer:
    """Frames (H, W, 3) uint8 resized to `size` (H, W) and then centre-cropped to `crop` (H, W), either may be None,
    through small CPU pipelines, one per thread at a time, kept for reuse (`graph.cpu_pipelines`; `close` drops them)."""

    def __init__(self, size: tuple[int, int] | None, crop: tuple[int, int] | None = None,
                 max_frames: int = 64) -> None:
        if size is None and crop is None:
            raise ValueError("a Resizer resizes, crops or both")
        self.size = None if size is None else (int(size[0]), int(size[1]))
        self.crop = None if crop is None else (int(crop[0]), int(crop[1]))
        self.max_frames = max_frames
        self.pipelines = PipelinePool(self._pipeline)

    @property
    def out(self) -> tuple[int, int]:
        """The (H, W) of the frames it gives."""
        return self.crop or self.size  # type: ignore[return-value]  # one of them is set

    def label(self) -> str:
        """What it does, for the names of the frames the cache keeps (`decode.frame_cache.kept_as`)."""
        return ", ".join(f"{what} to {hw[0]}x{hw[1]}" for what, hw in (("resized", self.size), ("cropped", self.crop))
                         if hw is not None)

    def _pipeline(self):
        from nvidia.dali import fn, types
        from nvidia.dali.pipeline import Pipeline

        pipe = Pipeline(batch_size=self.max_frames, num_threads=1, device_id=None, prefetch_queue_depth=1,
                        exec_dynamic=True)
        with pipe:
            frames = fn.external_source(name="frames", layout="HWC", dtype=types.UINT8, ndim=3)
            if self.size is not None:
                frames = fn.resize(frames, size=list(self.size), antialias=True)
            if self.crop is not None:
                frames = fn.crop(frames, crop=list(self.crop))
            pipe.set_outputs(frames)
        pipe.build()
        return pipe

    def __call__(self, frames: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """`frames` brought to `out`: (N, h, w, 3) uint8, an array of its own."""
        out = np.empty((len(frames), *self.out, 3), np.uint8)
        with self.pipelines.take() as pipe:
            for start in range(0, len(frames), self.max_frames):
                part = [np.ascontiguousarray(f) for f in frames[start:start + self.max_frames]]
                pipe.feed_input("frames", part)
                (done,) = pipe.run()
                for n in range(len(part)):
                    out[start + n] = np.asarray(done.at(n))  # copied out: DALI reuses its buffers
        return out

    def close(self) -> None:
        self.pipelines.close()
