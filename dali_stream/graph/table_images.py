"""A camera stored as images in the frame tables (lerobot's `dtype: image`, recorded with `use_videos=False`): each
sample's rows' encoded images (`graph.locate` hands them over in place of a segment) decoded on the workers
(`decode.images`), brought to the batch's size by DALI's CPU resize and crop where `resize`/`crop` ask
(`graph.resizer`), and laid out as the host frames are (`graph.host`): dtype, mean/std, `channels_last`. Such a camera
never enters the DALI graph; `augment=` (a graph hook) is refused for it (`loader.assemble`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..decode.images import decode_image
from .buffers import BufferPool
from .host import host_dtype, host_shape, lay_out
from .imageops import ImageOps
from .sources import CameraBatch, CameraFrames, Output


@dataclass
class StoredImages:
    """What `graph.locate` gives in place of a segment for a camera stored in the tables: a sample's steps' encoded
    images and, for messages, its episode and the steps' frame indices."""

    blobs: list[bytes]
    episode: int
    frames: list[int]


class TableImages:
    """A FrameSource (`graph.sources`): per sample its steps' encoded images (`batch.segs[j]`, a `StoredImages`;
    None where a mixture's member lacks the camera: zeros), laid out into a buffer of `buffers`. `size`: the
    camera's (H, W) as stored; `resizer`: `graph.resizer.Resizer` for `resize`/`crop` (closed here), or None."""

    engine: str | None = None
    in_graph = False
    outputs: tuple[Output, ...] = ()

    def __init__(self, key: str, route: str, buffers: BufferPool, image_ops: ImageOps, size: tuple[int, int],
                 resizer: Any = None) -> None:
        self.key, self.route, self.buffers, self.image_ops = key, route, buffers, image_ops
        self.size, self.resizer = size, resizer

    def frames_for(self, batch: CameraBatch) -> CameraFrames:
        steps = len(batch.idx[0])
        pictures: list[np.ndarray | None] = []
        for stored in batch.segs:
            pictures += [None] * steps if stored is None else [
                decode_image(blob, f"camera {self.key!r}, episode {stored.episode}, frame {frame}")
                for blob, frame in zip(stored.blobs, stored.frames)]
        decoded = [p for p in pictures if p is not None]
        if self.resizer is not None and decoded:
            resized = iter(self.resizer(decoded))
            pictures = [None if p is None else next(resized) for p in pictures]
        h, w = self.resizer.out if self.resizer is not None else self.size
        blank = np.zeros((h, w, 3), np.uint8)  # a member without the camera: zeros
        out = self.buffers.take(host_shape(self.image_ops, len(batch.segs), steps, h, w), host_dtype(self.image_ops))
        lay_out(out, [blank if p is None else p for p in pictures], self.image_ops)
        for j, stored in enumerate(batch.segs):
            if stored is None:  # zeros, after mean/std too (as a graph camera's missing samples)
                out[j] = 0
        return CameraFrames(host=out, decoded=len(decoded))

    def close(self) -> None:
        self.buffers.clear()
        if self.resizer is not None:
            self.resizer.close()
