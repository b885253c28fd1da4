"""What a camera's frame source is made of, in one kit: a route picks which kind of source its camera gets
(`decode.route.Route.frame_source`), the kit makes it from what the sources share (the workers' decoders, the
host-frame buffers, the open-decoder engines' pictures, the resizers, the image ops).

`SourceKit.sources(routes)` gives each camera its source; a camera whose frames the decoded-frame cache keeps gets
its source wrapped (`graph.sources.CachedFrames`), so the batch's builder asks every source the same questions and
no source holds the cache (the wrapper hands it where to keep what it decodes, `CameraBatch.keep`).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..config import DepthOutputUnit
from ..decode.frame_cache import FrameCache
from ..decode.route import Route
from .buffers import BufferPool
from .dali_on_workers import DaliFrames
from .depth_source import DepthFrames
from .engine_pictures import EngineFrames
from .imageops import ImageOps
from .resizer import Resizer
from .sources import CachedFrames, DaliClips, EngineSource, FrameSource, HostFrames, WorkerPixels, Workers
from .table_images import TableImages


class SourceKit:
    """`catalog` (`meta.catalog.Catalog`); `engines`: engine route -> its engine; `workers`: what the workers'
    decoders share; `resizers`: the cameras the workers resize and crop before the decoded-frame cache keeps them;
    `dali_workers`: the cameras DALI's CPU decoder decodes on the workers; `host_cameras`: the cameras laid out by the
    workers straight into the batch (host frames); `kept_chw`: the cameras the cache keeps (3, H, W); `buffers`: the
    host-frame buffers they share; `unit`: a depth camera's output unit; `frames`: the decoded-frame cache (None: off),
    in front of the sources of the cameras it keeps."""

    def __init__(self, catalog: Any, engines: Mapping[Route, Any], workers: Workers, resizers: Mapping[str, Resizer],
                 dali_workers: Mapping[str, DaliFrames], image_ops: ImageOps, host_cameras: tuple[str, ...],
                 kept_chw: tuple[str, ...], buffers: BufferPool, unit: DepthOutputUnit = "mm",
                 frames: FrameCache | None = None) -> None:
        self.catalog, self.workers, self.resizers, self.dali_workers = catalog, workers, resizers, dali_workers
        self.image_ops, self.host_cameras, self.kept_chw, self.buffers, self.unit = (image_ops, host_cameras,
                                                                                     kept_chw, buffers, unit)
        self.frames = frames
        self.pictures = EngineFrames(catalog, engines, resizers, self.blank)

    def sources(self, routes: Mapping[str, Route]) -> dict[str, FrameSource]:
        """Each camera's source, as its route picks it; behind the decoded-frame cache where it keeps the camera."""
        frames = self.frames
        out: dict[str, FrameSource] = {}
        for key, route in routes.items():
            source = route.frame_source(key, self)
            out[key] = CachedFrames(source, frames) if frames is not None and key in frames.labels else source
        return out

    def blank(self, key: str, steps: int) -> np.ndarray:
        """A sample's frames where its mixture member lacks the camera."""
        h, w = self.resizers[key].out if key in self.resizers else self.size(key)
        return np.zeros((steps, h, w, 3), np.uint8)

    def size(self, key: str) -> tuple[int, int]:
        h, w = self.catalog.fields[key].shape[:2]
        return h, w

    # what a route asks (`Route.frame_source`)
    def on_host(self, key: str) -> bool:
        return key in self.host_cameras

    def dali_on_workers(self, key: str) -> bool:
        return key in self.dali_workers

    # the sources a route picks from
    def host(self, key: str, route: Route) -> FrameSource:
        return HostFrames(key, route, self.workers, self.buffers, self.image_ops, self.size(key),
                          self.dali_workers.get(key), key in self.kept_chw)

    def pixels(self, key: str, route: Route) -> FrameSource:
        return WorkerPixels(key, route, self.workers, lambda steps: self.blank(key, steps), self.resizers.get(key),
                            self.dali_workers.get(key))

    def dali_clips(self, key: str, route: Route) -> FrameSource:
        return DaliClips(key, route)

    def engine(self, key: str, route: Route) -> FrameSource:
        return EngineSource(key, route, self.pictures, self.resizers.get(key))

    def depth(self, key: str, route: Route) -> FrameSource:
        codings = [m.camera(key).depth if key in m.own else None for m in self.catalog.members]
        return DepthFrames(key, route, self.buffers, codings, self.size(key), self.unit, self.image_ops.channels_last,
                           self.workers.episodes)

    def tables(self, key: str, route: Route) -> FrameSource:
        return TableImages(key, route, self.buffers, self.image_ops, self.size(key), self.resizers.get(key),
                           key in self.kept_chw)
