"""Per-sample clips for DALI's video decoder, so its cost does not grow with the depth of a frame in its episode.

DALI 2.4's `fn.decoders.video` builds no keyframe index: for every sample it decodes its stream from the
first frame up to the highest index asked for, and a repeated index decodes from the start again. Fed a
whole episode segment, frame 890 of a 900-frame VP9 episode costs ~60x frame 1. So a DALI-routed sample
gets a clip of its segment instead: the packets (decode order) from the last keyframe whose pts is at or
before the first frame it shows, through the last packet any of its frames needs (every packet whose pts
is at or before its last frame: B-frames decode after their forward references), written without
re-encoding by `fetch.mp4write` from the segment's own sample table (0.08 ms per clip against 1.5 ms for a
PyAV remux, 480p H.264: `benchmarks/segment_cut.py`). It is asked for each distinct frame once; `order` expands them back to the sample's steps
(a window clamped at an episode edge repeats frames), applied by `fn.sequence_rearrange` in the graph.

The decoder's work per sample is then the clip's frames up to the last one asked for (`frames_fed`):
at most a GOP plus the window's span, whatever the depth.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from ..fetch.clipping import clip_packets, packets_of
from ..fetch.segments import PacketIndex

__all__ = ["DaliInput", "clip_bytes", "clip_packets", "cut_clip", "dali_input", "packets_of"]


def cut_clip(data: bytes, index: PacketIndex, packets: np.ndarray) -> bytes:
    """`packets` of the segment whose `body` is `data` as a standalone MP4 (no re-encoding): written by `mp4write`
    from the segment's own sample table, or remuxed by PyAV when that table was not readable (then the body is the
    segment's MP4: only segments written from a sample table keep a body of samples alone)."""
    if index.stsd is not None and index.time_base.numerator == 1:
        from ..fetch.mp4write import write_mp4

        return write_mp4(index.stsd, index.time_base.denominator, index.size[packets], index.dts[packets],
                         index.pts[packets], index.duration[packets], index.key[packets],
                         clip_bytes(data, index, packets))
    import av

    from ..fetch.segments import mux

    with av.open(io.BytesIO(data)) as template:
        stream = template.streams.video[0]
        out = []
        for i in packets.tolist():
            pos, size = int(index.pos[i]), int(index.size[i])
            pkt = av.Packet(data[pos:pos + size])
            pkt.pts, pkt.dts, pkt.duration = int(index.pts[i]), int(index.dts[i]), int(index.duration[i])
            pkt.time_base = index.time_base
            pkt.is_keyframe = bool(index.key[i])
            out.append(pkt)
        return mux(stream, out)


def clip_bytes(data: bytes, index: PacketIndex, packets: np.ndarray, first: bytes | None = None) -> bytes:
    """The bytes of `packets` back to back, the first one replaced by `first` when given."""
    from ..fetch.segments import samples_bytes

    if first is None:
        return samples_bytes(data, 0, index.pos[packets], index.size[packets])
    return first + samples_bytes(data, 0, index.pos[packets[1:]], index.size[packets[1:]])


@dataclass(frozen=True)
class DaliInput:
    """What DALI's decoder gets for one sample: the clip, the distinct frames in it, and the expansion."""

    data: np.ndarray  # (bytes,) uint8: the clip (or the whole segment when the clip would be all of it)
    frames: np.ndarray  # (U,) int32 distinct frame indices into the clip, ascending
    order: np.ndarray  # (T,) int32 index into `frames` for each of the sample's steps

    @property
    def frames_fed(self) -> int:
        """Frames DALI decodes for this sample: its clip from the first frame to the last one asked for."""
        return int(self.frames.max()) + 1


def dali_input(seg, indices: np.ndarray) -> DaliInput:
    """The clip of `seg` (a `segments.Segment`) for frames `indices` (segment-relative, sorted-pts order)."""
    wanted, order = np.unique(np.asarray(indices, dtype=np.int64), return_inverse=True)
    index = packets_of(seg)
    shown = np.sort(index.pts)  # the segment's frames in presentation order, as ticks
    packets = clip_packets(index, int(shown[wanted[0]]), int(shown[wanted[-1]]), seg.resets())
    if len(packets) == len(index.pts):
        data, frames = seg.data, wanted
    else:
        data = cut_clip(seg.body, index, packets)
        frames = np.searchsorted(np.sort(index.pts[packets]), shown[wanted])
    return DaliInput(np.frombuffer(data, dtype=np.uint8), frames.astype(np.int32), order.astype(np.int32))
