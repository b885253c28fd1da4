"""A depth camera's frames: its 12-bit codes decoded on the workers (`decode.depth`) and written straight into the
batch as depth (`meta.depth.DepthCoding`), in `depth_output_unit`, float32: the camera's (B, T, 1, H, W) tensor as
lerobot's dataset returns it, whatever the batch's device or image ops (the DALI graph takes RGB pictures only).

The buffer is one of the host cameras' reused ones (`graph.buffers`), (B, T, H, W, 1) with `channels_last` as the
RGB host frames are (the caller gets the same (B, T, 1, H, W) view, `graph.host.to_output`). A mixture's member
lacking the camera gives zeros; each sample's codes are read with its own member's coding. The decoded-frame cache
keeps the codes ((H, W) uint16, `decode.frame_cache`, named as a video camera's frames): a sample whose frames it all
holds decodes none, and those decoded are handed back to be kept there (`CameraBatch.keep`). Under a pool an open
episode's codes are decoded once, front to back, and held while it stays open (`decode.open_episodes`), as a
torchcodec camera's frames are.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..config import DepthOutputUnit
from ..decode.depth import depth_codes_each
from ..decode.open_episodes import EpisodeFrames, asked_by
from ..decode.route import Route
from ..meta.depth import DepthCoding
from .buffers import BufferPool
from .sources import CameraBatch, CameraFrames, Source
from .worker_decode import decode_segments


class DepthFrames(Source):
    """A FrameSource (`graph.sources`) for a depth camera: host frames of one channel of depth. `codings`: per
    mixture member its camera's coding (None: the member lacks it); `size`: the camera's (H, W); `episodes`: the
    pool's open episodes' frames (each episode's codes decoded once, front to back), or None."""

    in_graph = False
    buffers: BufferPool

    def __init__(self, key: str, route: Route, buffers: BufferPool, codings: Sequence[DepthCoding | None],
                 size: tuple[int, int], unit: DepthOutputUnit, channels_last: bool = False,
                 episodes: EpisodeFrames | None = None) -> None:
        self.key, self.route, self.buffers, self.episodes = key, route, buffers, episodes
        self.codings, self.size, self.unit, self.channels_last = list(codings), size, unit, channels_last

    def frames_for(self, batch: CameraBatch) -> CameraFrames:
        segs, idx = batch.segs, batch.idx
        steps = len(idx[0])
        h, w = self.size
        out = self.buffers.take((len(segs), steps, h, w, 1) if self.channels_last else (len(segs), steps, 1, h, w),
                                np.float32)
        planes = out[..., 0] if self.channels_last else out[:, :, 0]  # (B, T, H, W) views
        decoded = 0
        for members, wanted, codes, n in decode_segments(segs, idx, None, batch.keep, batch.names,
                                                         decode=depth_codes_each,
                                                         episodes=asked_by(self.episodes, batch.plan),
                                                         pixel_bytes=2):
            decoded += n
            codes = np.asarray(codes)  # a list where some came from the cache
            for j in members:
                coding = self.codings[int(batch.member_index[j])]
                assert coding is not None  # a member lacking the camera has no segment
                coding.write(codes[np.searchsorted(wanted, idx[j])], planes[j], self.unit)
        for j, seg in enumerate(segs):
            if seg is None:  # a mixture's member without the camera: zeros (a reused buffer holds old frames)
                planes[j] = 0
        return CameraFrames(host=out, decoded=decoded)

    def close(self) -> None:
        self.buffers.clear()
