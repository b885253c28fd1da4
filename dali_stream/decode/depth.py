"""A depth camera's frames as their 12-bit codes: FFmpeg's decoder through PyAV on the workers' threads, the route
`depth` (`decode.route`), as lerobot 0.6.1 decodes depth (torchcodec hands out 8-bit RGB only, NVDEC no 12-bit
grey). `meta.depth.DepthCoding` turns the codes into depth.

`depth_codes(seg, indices)` demuxes the segment's packets, starts decoding at the last keyframe shown at or before
the first frame asked (a keyframe's leading pictures come before it: it shows none of them), and keeps each frame
asked by its presentation time: every frame returned is the one planned at that time, as `decode.cpu` checks
torchcodec's (a frame asked but never shown raises `WrongFrameError`).
"""

from __future__ import annotations

import io

import numpy as np

from ..errors import WrongFrameError
from ..fetch.segments import Segment, decode_error
from ..meta.depth import PIX_FMT
from .route import DEPTH


def codes_of(frame) -> np.ndarray:
    """A decoded depth frame's (H, W) uint16 codes, read from its 12-bit grey plane (PyAV's `to_ndarray` converts
    gray12le only from PyAV 15 on; a frame in another format, a 12-bit YUV, is converted to it first)."""
    if frame.format.name != PIX_FMT:
        frame = frame.reformat(format=PIX_FMT)
    plane = frame.planes[0]
    rows = np.frombuffer(plane, dtype="<u2").reshape(frame.height, plane.line_size // 2)
    return rows[:, :frame.width].copy()


def depth_codes(seg: Segment, indices: np.ndarray, lead_in: bool = False) -> np.ndarray:
    """Frames `indices` (sorted, distinct) of the segment as (N, H, W) uint16 codes, in that order. `lead_in`: frames
    shown before the segment's first keyframe may be missing (zeros): a segment decoded whole for the open episodes'
    frames (`decode.open_episodes`) asks for them too, but a cut from an open GOP's keyframe (x265's CRA, spliced
    as a BLA: `fetch.nal`) cannot show its leading pictures, which come before the episode's first frame and are
    never a sample's."""
    import av

    indices = np.asarray(indices, dtype=np.int64)
    planned = seg.pts_s - seg.pts_s[0]  # the frames' times from the segment's first
    got: dict[int, np.ndarray] = {}
    try:
        with av.open(io.BytesIO(seg.data)) as container:
            stream = container.streams.video[0]
            packets = [p for p in container.demux(stream) if p.size]
            if not packets:
                raise ValueError("no packets")
            base = float(stream.time_base)
            shown = [p.pts for p in packets if p.pts is not None]
            origin = min(shown) * base  # a decoder counts time from the stream's first frame shown
            first = origin + planned[indices[0]]
            starts = [n for n, p in enumerate(packets) if p.is_keyframe and p.pts is not None
                      and p.pts * base <= first + seg.half_gap_s]
            codec = stream.codec_context
            wanted = set(indices.tolist())
            for packet in [*packets[starts[-1] if starts else 0:], None]:
                for frame in codec.decode(packet):
                    if frame.pts is None:
                        continue
                    t = frame.pts * base - origin
                    k = int(np.searchsorted(planned, t))
                    k = k if k < len(planned) and (k == 0 or planned[k] - t < t - planned[k - 1]) else k - 1
                    if k in wanted and abs(planned[k] - t) <= seg.half_gap_s:
                        got[k] = codes_of(frame)
                if len(got) == len(wanted):
                    break
    except Exception as exc:
        raise decode_error(seg, DEPTH.name, exc) from exc
    missing = [int(i) for i in indices if int(i) not in got]
    if missing and lead_in and got:
        first_key = min(got)  # decoding starts at a keyframe: nothing shown before it is decodable from this cut
        if all(i < first_key for i in missing):
            return np.stack([got[int(i)] if int(i) in got else np.zeros_like(got[first_key]) for i in indices])
    if missing:
        raise WrongFrameError(
            f"{DEPTH.name}: the decoder showed no frame at the planned time of frame {missing[0]} "
            f"({planned[missing[0]]:.6f}s into the segment) of episode {seg.episode}, camera {seg.camera!r} "
            f"({seg.codec}, cut from {seg.source}); {len(missing)} of {len(indices)} frames asked were not shown. A "
            "bug in dali_stream or the decoder, not in your data: please report it with the output of `dali-stream "
            "verify DATASET --decode`")
    return np.stack([got[int(i)] for i in indices])


def depth_codes_each(asked: list[tuple[Segment, np.ndarray]]) -> list[np.ndarray]:
    """`depth_codes` of each (segment, frame indices): the decoder `graph.worker_decode.decode_segments` calls (every
    frame of a segment asked: decoded whole for the open episodes' frames, its lead-in may be missing)."""
    return [depth_codes(seg, indices, lead_in=len(indices) == len(seg.pts_s)) for seg, indices in asked]
