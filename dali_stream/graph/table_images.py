"""A camera stored as images in the frame tables (lerobot's `dtype: image`, recorded with `use_videos=False`): each
sample's rows' encoded images (`graph.locate` hands them over in place of a segment) decoded on the workers
(`decode.images`), brought to the batch's size by DALI's CPU resize and crop where `resize`/`crop` ask
(`graph.resizer`), and laid out as the host frames are (`graph.host`): dtype, mean/std, `channels_last`. Such a camera
never enters the DALI graph; `augment=` (a graph hook) is refused for it (`loader.assemble`). The decoded-frame cache
keeps its pictures as a video camera's (`decode.frame_cache`, named by data file, column and row: `FrameCache.row_names`),
resized and cropped, (3, H, W) where `Resolved.kept_chw` says: a sample whose images it all holds decodes none, and
those decoded are handed back to be kept there (`CameraBatch.keep`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..decode.images import decode_image
from ..decode.route import Route
from .buffers import BufferPool
from .host import host_dtype, host_shape, lay_out
from .imageops import ImageOps
from .sources import CameraBatch, CameraFrames, Source
from .worker_decode import Held, chw_frames


@dataclass
class StoredImages:
    """What `graph.locate` gives in place of a segment for a camera stored in the tables: a sample's steps' encoded
    images (`bytes`, or a `memoryview` of a table mapped from the table cache: `fetch.mapped_images`) and, for
    messages, its episode and the steps' frame indices."""

    blobs: list[bytes | memoryview]
    episode: int
    frames: list[int]


class TableImages(Source):
    """A FrameSource (`graph.sources`): per sample its steps' encoded images (`batch.segs[j]`, a `StoredImages`; a
    `Held` where the decoded-frame cache holds them all; None where a mixture's member lacks the camera: zeros),
    laid out into a buffer of `buffers`. `size`: the camera's (H, W) as stored; `resizer`:
    `graph.resizer.Resizer` for `resize`/`crop` (closed here), or None; `chw`: the decoded-frame cache keeps the
    pictures (3, H, W)."""

    in_graph = False
    buffers: BufferPool

    def __init__(self, key: str, route: Route, buffers: BufferPool, image_ops: ImageOps, size: tuple[int, int],
                 resizer: Any = None, chw: bool = False) -> None:
        self.key, self.route, self.buffers, self.image_ops = key, route, buffers, image_ops
        self.size, self.resizer, self.chw = size, resizer, chw

    def _decoded(self, batch: CameraBatch) -> tuple[list[list[np.ndarray] | None], int]:
        """Per sample its pictures as the cache keeps them (resized, cropped, (3, H, W) where `chw`), the held ones
        as they are and the others decoded (and handed to `batch.keep`); None where its member lacks the camera."""
        pictures: list[list[np.ndarray] | None] = []
        decoded: list[np.ndarray] = []
        for stored in batch.segs:
            if stored is None or isinstance(stored, Held):
                pictures.append(None if stored is None else stored.pictures)
                continue
            images = [decode_image(blob, f"camera {self.key!r}, episode {stored.episode}, frame {frame}")
                      for blob, frame in zip(stored.blobs, stored.frames)]
            pictures.append(images)
            decoded += images
        if not decoded:
            return pictures, 0
        shaped = iter(self.resizer(decoded) if self.resizer is not None else decoded)
        for j, stored in enumerate(batch.segs):
            if isinstance(stored, StoredImages):
                kept = [next(shaped) for _ in stored.blobs]
                sample = list(chw_frames(kept)) if self.chw else kept
                pictures[j] = sample
                if batch.keep is not None and batch.names is not None and batch.names[j] is not None:
                    batch.keep(batch.names[j][0], sample)
        return pictures, len(decoded)

    def frames_for(self, batch: CameraBatch) -> CameraFrames:
        steps = len(batch.idx[0])
        pictures, decoded = self._decoded(batch)
        h, w = self.resizer.out if self.resizer is not None else self.size
        blank = np.zeros((3, h, w) if self.chw else (h, w, 3), np.uint8)  # a member without the camera: zeros
        out = self.buffers.take(host_shape(self.image_ops, len(batch.segs), steps, h, w), host_dtype(self.image_ops))
        lay_out(out, [p for sample in pictures for p in (sample if sample is not None else [blank] * steps)],
                self.image_ops, self.chw)
        for j, sample in enumerate(pictures):
            if sample is None:  # zeros, after mean/std too (as a graph camera's missing samples)
                out[j] = 0
        return CameraFrames(host=out, decoded=decoded)

    def close(self) -> None:
        self.buffers.clear()
        if self.resizer is not None:
            self.resizer.close()
