"""What a decoder that stays open is fed for a batch's frames of one camera: packets, not containers.

The open-decoder engine (`decode.engine`) keeps one decoder per (decode thread, camera) for the loader's life and
feeds it the packets the segment's sample table already lists (`Segment.packets`): no MP4 is parsed or written
per clip. For each segment a batch reads, its distinct frames become clips (`fetch.clipping.clip_packets`: the keyframe
that resets the decoder at or before a frame, through the last packet the frame needs, without that keyframe's
leading pictures); frames whose keyframe lies inside the previous clip's packets extend that clip instead of
starting another. The clips of every segment are then fed back to back, in the bitstream form decoders take
from a packet stream:

- H.264/HEVC: length-prefixed NAL units become Annex-B (start codes), and every keyframe is preceded by the
  parameter sets of the track's decoder configuration (`avcC`/`hvcC`), so a decoder needs no extradata and may
  start at any clip. A clip's first HEVC CRA picture is turned into a BLA_W_LP picture (`fetch.nal`): a new
  coded video sequence, whose leading pictures are not expected.
- AV1: a keyframe temporal unit without a sequence header OBU gets the `av1C` configuration OBUs before it.
- VP8/VP9: as stored (superframes included: decoders split them).

A decoder ends each clip as a stream (`clip_ranges`: end of stream, then reset; the decoder stays open): fed back
to back, FFmpeg's HEVC decoder dropped a clip's IDR or BLA picture as a "duplicate POC in a sequence" of the
previous clip's picture with the same order count (lerobot's g=2 files, where every IRAP picture has POC 0), even
after an end-of-sequence NAL unit, and the pictures referring to it came out grey.

Every packet carries a presentation time of the feed's own, its clip's pts shifted so that clips follow one
another without overlap: a decoded picture is known by the time the decoder hands back with it, never by how
many pictures came before (a packet that yields no picture, or two, shifts nothing), and an asked frame that
the decoder does not produce is missing, not silently replaced (`missing`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..errors import DecodeError
from ..fetch import nal
from ..fetch.clipping import clip_packets, packets_of
from ..fetch.pictures import av1_obus
from ..fetch.segments import PacketIndex, Segment

START_CODE = b"\x00\x00\x00\x01"
CONFIG_BOXES = {"h264": b"avcC", "hevc": b"hvcC", "av1": b"av1C"}
AV1_SEQUENCE_HEADER = 1  # obu_type


@dataclass(frozen=True)
class Feed:
    """A batch's packets of one camera for a decoder fed packet by packet, and which decoded pictures are asked.

    `units[i]` is packet i's bytes in the decoder's bitstream form, `pts[i]` its presentation time in the feed
    (ticks; clips never overlap). `asked[j]` lists, per step of part j, the feed time of the picture it shows."""

    codec: str
    units: list[bytes]
    pts: np.ndarray  # (N,) int64
    asked: list[np.ndarray]  # per part: (T,) int64 feed times
    starts: np.ndarray  # (C,) index in `units` of each clip's first packet (a keyframe that resets the decoder)
    sources: tuple[str, ...]  # (C,) the file each clip was cut from

    @property
    def clips(self) -> int:
        return len(self.starts)

    def clip_ranges(self) -> list[tuple[int, int]]:
        """(first, end) unit index of each clip: a decoder ends the stream after each (module doc)."""
        ends = np.append(self.starts[1:], len(self.units))
        return list(zip(self.starts.tolist(), ends.tolist()))

    @property
    def wanted(self) -> np.ndarray:
        """The distinct feed times of pictures some part asks for, ascending."""
        return np.unique(np.concatenate(self.asked)) if self.asked else np.zeros(0, np.int64)

    def missing(self, produced) -> np.ndarray:
        """The asked feed times among `wanted` that are not in `produced` (the times a decoder handed back)."""
        return np.setdiff1d(self.wanted, np.fromiter(produced, np.int64))


def build_feed(parts: list[tuple[Segment, np.ndarray]]) -> Feed:
    """The feed for `parts`: per part, a segment (`fetch.segments.Segment`) and the frame indices its steps show
    (segment-relative, presentation order). Parts of one segment share its clips."""
    if not parts:
        raise ValueError("a feed needs at least one part")
    codec = parts[0][0].codec
    by_seg: dict[int, tuple[Segment, list[int]]] = {}
    for j, (seg, _) in enumerate(parts):
        by_seg.setdefault(seg.uid, (seg, []))[1].append(j)
    units: list[bytes] = []
    pts_parts: list[np.ndarray] = []
    asked: list[np.ndarray | None] = [None] * len(parts)
    running = 0
    starts: list[int] = []
    sources: list[str] = []
    for seg, members in by_seg.values():
        index = packets_of(seg)
        shown = np.sort(index.pts)
        wanted = np.unique(np.concatenate([np.asarray(parts[j][1], np.int64) for j in members]))
        config = decoder_config(seg, index)
        feed_time = np.full(len(shown), -1, np.int64)  # segment frame -> feed time (wanted ones only)
        for packets in segment_clips(index, shown[wanted], seg.resets()):
            starts.append(len(units))
            sources.append(seg.source)
            shift = running - int(index.pts[packets].min())
            clip_pts = index.pts[packets] + shift
            for n, p in enumerate(packets.tolist()):
                sample = seg.body[int(index.pos[p]):int(index.pos[p] + index.size[p])]
                units.append(bitstream_unit(codec, sample, config, bool(index.key[p]), first=n == 0))
            pts_parts.append(clip_pts)
            inside = np.isin(shown[wanted], index.pts[packets])  # clips of a segment share no packet
            feed_time[wanted[inside]] = shown[wanted[inside]] + shift
            running = int(clip_pts.max()) + 1
        if (feed_time[wanted] < 0).any():
            raise DecodeError(f"frames {wanted[feed_time[wanted] < 0].tolist()} of episode {seg.episode}, camera "
                              f"{seg.camera!r} fell in no clip of the packet feed: a dali_stream bug; decode the "
                              f"camera with torchcodec, decode={{{seg.camera!r}: 'cpu'}}, and report it")
        for j in members:
            asked[j] = feed_time[np.asarray(parts[j][1], np.int64)]
    return Feed(codec, units, np.concatenate(pts_parts), [a for a in asked if a is not None],
                np.asarray(starts, np.int64), tuple(sources))


def segment_clips(index: PacketIndex, ticks: np.ndarray, resets: np.ndarray) -> list[np.ndarray]:
    """The clips (packet indices, decode order) that decode every frame shown at `ticks` (ascending, distinct):
    a frame whose resetting keyframe lies within the current clip's packets extends the clip (its packets are fed
    anyway); any other starts a new clip at that keyframe."""
    keys = np.flatnonzero(resets)
    out: list[np.ndarray] = []
    first = -1
    for tick in ticks.tolist():
        at = keys[index.pts[keys] <= tick]
        key = int(at[-1]) if len(at) else 0
        if out and key <= int(out[-1][-1]):  # its keyframe is fed already: the clip runs on to this frame
            out[-1] = clip_packets(index, first, tick, resets)
        else:
            first = tick
            out.append(clip_packets(index, first, tick, resets))
    return out


def decoder_config(seg, index: PacketIndex) -> bytes:
    """The track's decoder configuration record (`avcC`, `hvcC` or `av1C` payload; b"" for other codecs): from
    the segment's `stsd`, else the extradata FFmpeg reads from the segment."""
    box = CONFIG_BOXES.get(seg.codec)
    if box is None:
        return b""
    if index.stsd is not None:
        stsd = bytes(index.stsd)
        at = stsd.find(box)
        if at >= 4:
            size = int.from_bytes(stsd[at - 4:at], "big")
            return stsd[at + 4:at - 4 + size]
    import io

    import av

    with av.open(io.BytesIO(seg.data)) as container:
        return bytes(container.streams.video[0].codec_context.extradata or b"")


@functools.lru_cache(maxsize=64)
def parameter_sets(codec: str, config: bytes) -> tuple[int, bytes]:
    """(NAL length size, the parameter set NAL units as Annex-B) of an `avcC` or `hvcC` record; parsed once per
    record, not per packet."""
    sets = []
    if codec == "h264":
        at = 6
        for _ in range(config[5] & 0x1F):  # sequence parameter sets
            n = int.from_bytes(config[at:at + 2], "big")
            sets.append(config[at + 2:at + 2 + n])
            at += 2 + n
        count, at = config[at], at + 1
        for _ in range(count):  # picture parameter sets
            n = int.from_bytes(config[at:at + 2], "big")
            sets.append(config[at + 2:at + 2 + n])
            at += 2 + n
        size = (config[4] & 3) + 1
    else:
        size, at = (config[21] & 3) + 1, 23
        for _ in range(config[22]):
            count = int.from_bytes(config[at + 1:at + 3], "big")
            at += 3
            for _ in range(count):
                n = int.from_bytes(config[at:at + 2], "big")
                sets.append(config[at + 2:at + 2 + n])
                at += 2 + n
    return size, b"".join(START_CODE + unit for unit in sets)


def annexb(codec: str, sample: bytes, config: bytes, key: bool, first: bool) -> bytes:
    """A length-prefixed H.264/HEVC sample as Annex-B: the configuration's parameter sets first on a keyframe, a
    clip's first HEVC CRA slice turned into BLA_W_LP (`fetch.nal.cra_to_bla`)."""
    size, sets = parameter_sets(codec, config)
    out = bytearray(sets if key else b"")
    for at, header in nal.nal_units(sample, size):
        unit = sample[at:at + int.from_bytes(sample[at - size:at], "big")]
        if first and codec == "hevc":
            unit = bytes([nal.cra_to_bla(header)]) + unit[1:]
        out += START_CODE + unit
    return bytes(out)


def av1_has_sequence_header(sample: bytes) -> bool:
    """Whether a temporal unit (low-overhead OBUs) holds a sequence header OBU."""
    return any(obu_type == AV1_SEQUENCE_HEADER for obu_type, *_ in av1_obus(sample))


def bitstream_unit(codec: str, sample: bytes, config: bytes, key: bool, first: bool) -> bytes:
    """One packet of a clip in the form a decoder fed packet by packet takes (module doc)."""
    if codec in ("h264", "hevc"):
        return annexb(codec, sample, config, key, first)
    if codec == "av1" and key and len(config) > 4 and not av1_has_sequence_header(sample):
        return config[4:] + sample
    return sample
