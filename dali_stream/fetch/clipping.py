"""Which packets of a segment decode a run of its frames (a clip), and a segment's packet table with its errors
named: what DALI's per-sample clips (`graph.clips`), joined streams (`graph.joined`) and the open-decoder engine's
packet feeds (`decode.feed`) are cut by."""

from __future__ import annotations

import numpy as np

from .segments import PacketIndex


def clip_packets(index: PacketIndex, first_pts: int, last_pts: int, starts: np.ndarray | None = None) -> np.ndarray:
    """Packets (indices, decode order) that decode every frame shown from `first_pts` to `last_pts`: the last
    keyframe at or before `first_pts` that resets the decoder (`starts`, default every keyframe: see
    `Segment.resets`; else the segment's first packet), through the last packet shown at or before `last_pts`,
    without the keyframe's leading pictures (packets after it shown before it: open-GOP B-frames, HEVC
    RASL/RADL). A decoder starting at the keyframe drops RASL pictures, which would shift every later index;
    trailing pictures never reference leading ones, and no frame asked is one. An H.264 I picture without IDR
    does not reset the decoder: FFmpeg then withholds the frames after it in a short clip."""
    keys = np.flatnonzero((index.key if starts is None else starts) & (index.pts <= first_pts))
    start = int(keys[-1]) if len(keys) else 0
    needed = np.flatnonzero(index.pts[start:] <= last_pts)
    stop = start + int(needed[-1]) + 1 if len(needed) else start + 1
    part = np.arange(start, stop)
    return part[index.pts[part] >= index.pts[start]]


def packets_of(seg) -> PacketIndex:
    """`seg.packets()`, or a DecodeError naming the episode and camera when the segment's bytes do not demux."""
    try:
        return seg.packets()
    except Exception as exc:  # the segment's own bytes do not demux: its packets are damaged
        from .segments import decode_error

        raise decode_error(seg, "the clip cutter (DALI routes)", exc) from exc
