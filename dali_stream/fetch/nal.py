"""NAL unit headers of an MP4 track's samples (H.264, HEVC): whether a clip's first sample starts a stream
cleanly, and the splice that lets it start one in the middle of another stream.

DALI clips (`graph.clips`) start at the last keyframe (sync sample) at or before the first frame asked, and
joined streams (`graph.joined`) lay clips one after another. A keyframe then has to reset the decoder: AV1 and
VP8/VP9 keyframes, H.264 IDR pictures and HEVC IRAP pictures (IDR, CRA, BLA) do. An H.264 keyframe that is an
I picture without IDR (x264's open GOP) does not: its picture order counts continue the previous clip's, so
such a clip is decoded on its own. An HEVC CRA picture (x265's default keyframe, open GOP) resets the decoder
only at the start of a stream; in the middle of a joined stream it is spliced into a BLA picture by its NAL
unit type (the conversion the HEVC standard provides for splicing: BLA_W_LP starts a new coded video sequence,
so picture order counts restart and earlier pictures are output first).
"""

from __future__ import annotations

from typing import Iterator

H264_IDR = 5
HEVC_IRAP = range(16, 24)  # BLA_W_LP, BLA_W_RADL, BLA_N_LP, IDR_W_RADL, IDR_N_LP, CRA, reserved IRAP
HEVC_CRA, HEVC_BLA_W_LP = 21, 16
_H264, _HEVC = (b"avc1", b"avc3"), (b"hvc1", b"hev1")


def sample_entry(stsd: bytes) -> bytes:
    """The first sample entry's four-character code (`avc1`, `hvc1`, `av01`, `vp09`, ...) of a whole `stsd` box."""
    return stsd[20:24]  # stsd header (8), version and flags (4), entry count (4), entry size (4)


def length_size(stsd: bytes) -> int:
    """Bytes of each NAL unit's length prefix in the samples: from the avcC or hvcC decoder configuration."""
    entry = sample_entry(stsd)
    box, at = (b"avcC", 4) if entry in _H264 else (b"hvcC", 21)
    found = stsd.find(box)
    if found < 0:
        raise ValueError(f"no {box.decode()} box in the {entry.decode(errors='replace')} sample entry")
    return (stsd[found + 4 + at] & 3) + 1


def nal_units(sample: bytes, size: int) -> Iterator[tuple[int, int]]:
    """(offset of the NAL unit header, its first byte) of each NAL unit in a length-prefixed sample."""
    pos = 0
    while pos + size < len(sample):
        length = int.from_bytes(sample[pos:pos + size], "big")
        if length == 0 or pos + size + length > len(sample):
            return
        yield pos + size, sample[pos + size]
        pos += size + length


def _types(stsd: bytes, sample: bytes) -> list[int]:
    entry = sample_entry(stsd)
    size = length_size(stsd)
    if entry in _H264:
        return [b & 0x1F for _, b in nal_units(sample, size)]
    return [(b >> 1) & 0x3F for _, b in nal_units(sample, size)]


def starts_stream(stsd: bytes, sample: bytes) -> bool:
    """Whether a keyframe sample resets the decoder (after `splice`): every codec's keyframe but an H.264 one with
    no IDR slice, or an HEVC one with no IRAP slice."""
    entry = sample_entry(stsd)
    if entry in _H264:
        return H264_IDR in _types(stsd, sample)
    if entry in _HEVC:
        return any(t in HEVC_IRAP for t in _types(stsd, sample) if t < 32)
    return True


def splice(stsd: bytes, sample: bytes) -> bytes:
    """The sample with its HEVC CRA slices turned into BLA_W_LP ones (a new coded video sequence); any other
    sample unchanged."""
    if sample_entry(stsd) not in _HEVC:
        return sample
    out = bytearray(sample)
    for at, first in nal_units(sample, length_size(stsd)):
        out[at] = cra_to_bla(first)
    return bytes(out)


def cra_to_bla(header: int) -> int:
    """An HEVC NAL unit header's first byte, a CRA slice's turned into a BLA_W_LP one's (others unchanged)."""
    if (header >> 1) & 0x3F == HEVC_CRA:
        return (header & 0x81) | (HEVC_BLA_W_LP << 1)
    return header

