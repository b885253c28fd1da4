"""A batch's clips of one DALI-decoded camera joined into a few streams: one decoder session per stream.

DALI 2.4's `fn.decoders.video` creates a decoder for every sample of every batch (~8 ms on an H100's NVDEC,
serial whatever the thread count: benchmarks/results/NVIDIA-H100-80GB-HBM3/), so with one clip per sample
(`clips.dali_input`) a batch of 32 costs a quarter of a second per camera before a frame is decoded. Here the
batch's samples are split into at most `streams` contiguous groups; each group's clips (`clips.clip_packets`: a
keyframe at or before the first frame asked, through the last packet needed) are laid one after another in
time, each keyframe spliced to start a new sequence (`fetch.nal`: HEVC CRA -> BLA), and written as ONE MP4 by `fetch.mp4write` (no re-encoding), which DALI decodes as one sample at the
clips' frame offsets. Samples whose clips coincide (same segment, same packets) share one clip.

What the graph gets per sample slot (`graph.pipeline`): `lead` is True on the slot holding a stream (DALI's
conditional runs the decoder on those slots only), `encoded`/`frames` the stream and its distinct frames
(presentation order, ascending), `source` the slot whose stream holds this sample's frames
(`fn.permute_batch`), `order` this sample's steps as indices into that stream's frames
(`fn.sequence_rearrange`).

Clips join only when their codec configurations match (`codec_config`: codec, size, the decoder configuration
and colour boxes, timescale). A group whose clips differ (files of one camera encoded apart) gets a
stream per configuration. Clips start at keyframes that reset the decoder (`Segment.resets`: not an H.264 I
picture without IDR); one that can only start at its segment's first packet, which does not reset it, or one
without a readable sample table (`clips.cut_clip` remuxes it with PyAV), stays a stream of its own. A group of one sample is that sample's clip, as on the per-sample route.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..fetch.mp4write import write_mp4
from ..fetch import nal
from ..fetch.segments import PacketIndex
from .clips import clip_bytes, clip_packets, dali_input, packets_of

PLACEHOLDER = np.zeros(3, np.uint8)  # a non-lead slot's `encoded`: never decoded (one FHWC pixel for the graph)
NO_FRAMES = np.zeros(0, np.int32)


DECODER_BOXES = (b"avcC", b"hvcC", b"av1C", b"vpcC", b"colr")  # what a decoder reads of a sample entry's boxes


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
class JoinedInputs:
    """Per sample slot of one camera: what `graph.pipeline`'s joined decode reads (see the module doc)."""

    lead: list[np.ndarray] = field(default_factory=list)  # () bool
    encoded: list[np.ndarray] = field(default_factory=list)  # (bytes,) uint8
    frames: list[np.ndarray] = field(default_factory=list)  # (U,) int32 ascending, empty off the leads
    source: list[np.ndarray] = field(default_factory=list)  # () int32
    order: list[np.ndarray] = field(default_factory=list)  # (T,) int32
    streams: int = 0  # decoder sessions this batch costs
    frames_fed: int = 0  # frames the decoder works through, summed over the streams
    members: dict[int, list[int]] = field(default_factory=dict)  # lead slot -> the samples its stream serves


@dataclass
class _Wanted:
    """One sample's clip: packets [start, stop) of its segment and the clip-relative frames it shows."""

    slot: int
    seg: object
    index: PacketIndex
    packets: np.ndarray  # the clip's packets (`clips.clip_packets`)
    indices: np.ndarray  # (T,) the frames its steps show (segment-relative)
    ticks: np.ndarray  # (U,) pts of the distinct frames asked, ascending
    order: np.ndarray  # (T,) index into `ticks` per step


def join_inputs(segs: list, indices: list[np.ndarray], streams: int) -> JoinedInputs:
    """The joined streams of a batch's samples of one camera: `segs[j]` is sample j's segment, `indices[j]` the
    frames (segment-relative, presentation order) its steps show; at most `streams` groups (>= 1)."""
    size = len(segs)
    out = JoinedInputs(lead=[np.array(False)] * size, encoded=[PLACEHOLDER] * size, frames=[NO_FRAMES] * size,
                       source=[np.array(0, np.int32)] * size, order=[NO_FRAMES] * size)
    for group in np.array_split(np.arange(size), min(max(1, streams), size)):
        by_config: dict[object, list[_Wanted]] = {}
        for j in group.tolist():
            index = packets_of(segs[j])
            wanted, order = np.unique(np.asarray(indices[j], dtype=np.int64), return_inverse=True)
            shown = np.sort(index.pts)
            resets = segs[j].resets()
            packets = clip_packets(index, int(shown[wanted[0]]), int(shown[wanted[-1]]), resets)
            config = codec_config(index)
            if config is None or not resets[packets[0]]:  # a segment starting on an I picture without IDR
                config = ("alone", j)
            by_config.setdefault(config, []).append(_Wanted(j, segs[j], index, packets, indices[j], shown[wanted],
                                                               order))
        for members in by_config.values():
            _stream(out, members)
    return out


def _stream(out: JoinedInputs, members: list[_Wanted]) -> None:
    """One stream for `members` (same codec configuration), its lead the first member's slot."""
    lead = members[0].slot
    if len(members) == 1:  # the per-sample clip (or the whole segment when the clip would be all of it)
        one = dali_input(members[0].seg, members[0].indices)
        data, frames, orders = one.data, one.frames, [one.order]
    else:
        data, frames, orders = _joined(members)
    out.lead[lead] = np.array(True)
    out.encoded[lead] = data
    out.frames[lead] = frames
    for m, order in zip(members, orders):
        out.source[m.slot] = np.array(lead, np.int32)
        out.order[m.slot] = order
    out.streams += 1
    out.frames_fed += int(frames.max()) + 1
    out.members[lead] = [m.slot for m in members]


def _joined(members: list[_Wanted]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The members' clips one after another in time, as one MP4; its distinct frames asked (ascending) and each
    member's steps as indices into them."""
    placed: dict[tuple[int, int, int], tuple[int, np.ndarray]] = {}  # clip -> (first frame, its sorted pts)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("size", "dts", "pts", "duration", "key")}
    payload: list[bytes] = []
    shown = end = 0
    asked: list[np.ndarray] = []
    for m in members:
        part, ix = m.packets, m.index
        clip = (m.seg.uid, int(part[0]), int(part[-1]))
        if clip not in placed:
            shift = end - int(min(ix.dts[part].min(), ix.pts[part].min()))
            key = m.seg.data[int(ix.pos[part[0]]):int(ix.pos[part[0]] + ix.size[part[0]])]
            spliced = nal.splice(ix.stsd, key)
            sizes = ix.size[part].copy()
            sizes[0] = len(spliced)
            cols["size"].append(sizes)
            for name in ("duration", "key"):
                cols[name].append(getattr(ix, name)[part])
            cols["dts"].append(ix.dts[part] + shift)
            cols["pts"].append(ix.pts[part] + shift)
            payload.append(clip_bytes(m.seg.data, ix, part, spliced))
            placed[clip] = (shown, np.sort(ix.pts[part]))
            shown += len(part)
            end = int(max((cols["pts"][-1] + ix.duration[part]).max(), (cols["dts"][-1] + ix.duration[part]).max()))
        first, clip_pts = placed[clip]
        asked.append(first + np.searchsorted(clip_pts, m.ticks))
    first = members[0].index
    c = {k: np.concatenate(v) for k, v in cols.items()}
    data = write_mp4(first.stsd, first.time_base.denominator, c["size"], c["dts"], c["pts"], c["duration"], c["key"],
                     b"".join(payload))
    frames = np.unique(np.concatenate(asked))
    orders = [np.searchsorted(frames, a)[m.order].astype(np.int32) for a, m in zip(asked, members)]
    return np.frombuffer(data, np.uint8), frames.astype(np.int32), orders
