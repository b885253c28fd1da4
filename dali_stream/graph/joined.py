"""A batch's samples in groups, each group's clips of a DALI-decoded camera joined into one stream: one decoder
decoder per group instead of one per sample.

DALI 2.4's `fn.decoders.video` creates a decoder for every sample it decodes (~8 ms on an H100's NVDEC, serial
whatever the thread count: benchmarks/results/NVIDIA-H100-80GB-HBM3/), so with one clip per sample
(`clips.dali_input`) a batch of 32 costs a quarter of a second per camera before a frame is decoded. Here the
batch is split into `groups` contiguous groups of equal size (`group_sizes`); the DALI graph's batch is then the
groups, not the samples (`graph.batches`: every output carries a group's samples together, and the loader
reshapes the graph's (groups, members x steps, ...) outputs into (samples, steps, ...) views: no copy). Per
group and camera, the members' clips (`clips.clip_packets`: a keyframe that resets the decoder at or before the
first frame asked, through the last packet needed) are laid one after another in time, each keyframe spliced to
start a new sequence (`fetch.nal`: HEVC CRA -> BLA), and written as ONE MP4 by `fetch.mp4write` (no
re-encoding); DALI decodes it at the group's distinct frames and `order` lays them out member after member,
step after step. Members whose clips coincide (same segment, same packets) share one clip.

Clips join only when every packet decodes the one picture it shows (`fetch.pictures`: DALI's GPU decoder labels
pictures by a queue of packet times, so a VP9 superframe with a hidden alt-ref frame or an AV1 hidden or
show-existing frame would shift every later member of the group), their codec configurations match (`codec_config`: codec, size, the decoder configuration
and colour boxes, timescale), their segment has a sample table, and their first packet resets the decoder: a
batch where some group cannot be one stream (files of a camera encoded apart, a segment starting on an H.264 I
picture without IDR) is decoded one clip per sample (`join_group` returns None, the builder falls back).

torchcodec cameras join the same way a batch's pieces of long episodes (`join_pieces`: one piece per sample, cut
from the file's index by `fetch.pieces`), so one decoder serves the batch instead of one opened per piece.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..fetch import nal
from ..fetch.pictures import one_picture_per_packet
from ..fetch.segments import PacketIndex, Segment
from .clips import DaliInput, clip_bytes, clip_packets, dali_input, packets_of

_ONE = np.zeros(1, np.int64)  # `order` of a sample showing one frame
DECODER_BOXES = (b"avcC", b"hvcC", b"av1C", b"vpcC", b"colr")  # what a decoder reads of a sample entry's boxes


def group_sizes(size: int, groups: int) -> int:
    """Members per group for a batch of `size` samples in at most `groups` equal groups: the smallest divisor of
    `size` that makes `size / it` <= `groups` (a short last batch of a prime size is one group or one per sample)."""
    groups = max(1, min(groups, size))
    return next(n for n in range(-(-size // groups), size + 1) if size % n == 0)


def codec_config(index: PacketIndex) -> tuple | None:
    """What must match for clips to share a stream: the sample entry's codec, width and height, its decoder
    configuration and colour boxes (not `btrt`, each file's own bitrates, nor `pasp`, which FFmpeg's muxer writes
    for some files and not others), and the timescale. None when the clip cannot be written from the sample
    table (no `stsd`, or a time base other than 1/N)."""
    stsd = index.stsd
    if stsd is None or index.time_base.numerator != 1:
        return None
    stsd = bytes(stsd)
    entry_end = 16 + int.from_bytes(stsd[16:20], "big")  # the first sample entry, after the stsd's 16 bytes
    boxes, at = [], 16 + 8 + 78  # its children follow the entry header and the visual sample entry's fields
    while at + 8 <= entry_end:
        size = int.from_bytes(stsd[at:at + 4], "big")
        if size < 8:
            break
        if stsd[at + 4:at + 8] in DECODER_BOXES:
            boxes.append(stsd[at:at + size])
        at += size
    return stsd[20:24], stsd[48:52], tuple(boxes), index.time_base.denominator


@dataclass
class _Clip:
    """One member's clip: packets of its segment and the frames (pts, ascending) it asks for."""

    seg: Segment
    index: PacketIndex
    stsd: bytes  # the track's `stsd` (a clip joins only when it has one)
    packets: np.ndarray  # the clip's packets (`clips.clip_packets`)
    ticks: np.ndarray  # (U,) pts of the distinct frames asked, ascending
    order: np.ndarray  # (T,) index into `ticks` per step


def join_group(segs: list, indices: list[np.ndarray]) -> DaliInput | None:
    """One stream for a group's members of one camera (`segs[j]` member j's segment, `indices[j]` the frames its
    steps show, segment-relative, presentation order): the stream, its distinct frames asked (ascending) and
    `order`, the members' steps one member after another as indices into those frames. A group of one is the
    member's own clip (`clips.dali_input`). None when the clips cannot share a stream (module doc)."""
    if len(segs) == 1:
        return dali_input(segs[0], indices[0])
    clips = _clips(segs, indices)
    if clips is None or not all(one_picture_per_packet(c.seg.codec, _samples(c)) for c in clips):
        return None
    data, steps, _ = _joined(clips)
    frames, order = np.unique(steps, return_inverse=True)
    return DaliInput(np.frombuffer(data, np.uint8), frames.astype(np.int32), order.astype(np.int32))


def join_pieces(segs: list, indices: list[np.ndarray]) -> tuple[Segment, list[np.ndarray]] | None:
    """The pieces of long episodes a batch's samples read of one torchcodec camera (`fetch.pieces`: one per sample)
    as ONE segment, so one decoder serves them all instead of one opened per piece: the joined stream, its frames'
    times (stream time), and per sample the indices of its steps' frames in it. None for fewer than two pieces
    or pieces that cannot share a stream (module doc)."""
    if len(segs) < 2:
        return None
    clips = _clips(segs, indices)
    if clips is None:
        return None
    data, steps, shown = _joined(clips)
    ends = np.cumsum([len(c.order) for c in clips])[:-1]
    head = segs[0]
    episodes = sorted({seg.episode for seg in segs})
    joined = Segment(data, shown / clips[0].index.time_base.denominator,
                     f"{head.source} (the pieces of episodes {episodes} joined)", head.episode, head.camera,
                     head.codec, piece=True)
    return joined, [part.astype(np.int32) for part in np.split(steps, ends)]


def _samples(clip: _Clip):
    """The bytes of each of the clip's packets."""
    ix, data = clip.index, clip.seg.body
    return (data[int(ix.pos[p]):int(ix.pos[p] + ix.size[p])] for p in clip.packets.tolist())


def _clips(segs: list, indices: list[np.ndarray]) -> list[_Clip] | None:
    """Each member's clip, or None when they cannot share a stream (module doc)."""
    clips, config = [], None
    for seg, idx in zip(segs, indices):
        index = packets_of(seg)
        idx = np.asarray(idx, dtype=np.int64)
        wanted, order = (idx, _ONE) if len(idx) == 1 else np.unique(idx, return_inverse=True)  # one frame: no sort
        shown = np.sort(index.pts)
        resets = seg.resets()
        packets = clip_packets(index, int(shown[wanted[0]]), int(shown[wanted[-1]]), resets)
        mine = codec_config(index)
        if mine is None or not resets[packets[0]] or (config is not None and mine != config):
            return None
        config = mine
        clips.append(_Clip(seg, index, bytes(index.stsd or b""), packets, shown[wanted], order))
    return clips


def _joined(members: list[_Clip]) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The members' clips as one MP4, each member's steps as frames of it (member after member), and its frames'
    presentation times (ticks, ascending)."""
    placed: dict[tuple[int, int, int], tuple[int, np.ndarray]] = {}  # clip -> (its first frame, its sorted pts)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("size", "dts", "pts", "duration", "key")}
    payload: list[bytes] = []
    shown = end = 0
    asked: list[np.ndarray] = []
    for m in members:
        part, ix = m.packets, m.index
        lo, hi = int(part[0]), int(part[-1])
        clip = (m.seg.uid, lo, hi)
        if clip not in placed:
            at: Any = slice(lo, hi + 1) if hi - lo + 1 == len(part) else part  # a run of packets (the usual): views
            dts, pts, duration = ix.dts[at], ix.pts[at], ix.duration[at]
            shift = end - int(min(dts.min(), pts.min()))
            key = m.seg.body[int(ix.pos[lo]):int(ix.pos[lo] + ix.size[lo])]
            spliced = nal.splice(m.stsd, key)
            sizes = ix.size[at].copy()
            sizes[0] = len(spliced)
            cols["size"].append(sizes)
            cols["duration"].append(duration)
            cols["key"].append(ix.key[at])
            cols["dts"].append(dts + shift)
            cols["pts"].append(pts + shift)
            payload.append(clip_bytes(m.seg.body, ix, part, spliced))
            placed[clip] = (shown, np.sort(pts))
            shown += len(part)
            end = int(max((cols["pts"][-1] + duration).max(), (cols["dts"][-1] + duration).max()))
        first, clip_pts = placed[clip]
        asked.append((first + np.searchsorted(clip_pts, m.ticks))[m.order])  # this member's steps, as stream frames
    from ..fetch.mp4write import write_mp4

    head = members[0]
    c = {k: np.concatenate(v) for k, v in cols.items()}
    data = write_mp4(head.stsd, head.index.time_base.denominator, c["size"], c["dts"], c["pts"], c["duration"], c["key"],
                     b"".join(payload))
    return data, np.concatenate(asked), np.sort(c["pts"])
