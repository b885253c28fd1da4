"""Whether a packet decodes exactly the one picture it shows, read from its bytes (VP9, AV1).

DALI's GPU decoder labels decoded pictures from a queue of packet timestamps, one per decode callback, and counts
every callback as a shown frame. A packet that decodes a picture it does not show (a VP9 superframe carrying a
hidden alt-ref frame, an AV1 temporal unit with a frame whose show_frame is 0) or shows one it does not decode (AV1
show_existing_frame) breaks that one-to-one count: inside a joined stream (`graph.joined`) every later member of
the group would be labelled with another member's frames. Such cameras are decoded one clip per sample instead.
H.264/HEVC (one picture per access unit) and VP8 always map one to one.
"""

from __future__ import annotations

from typing import Iterator

OBU_FRAME_HEADER, OBU_FRAME = 3, 6


def vp9_hidden_pictures(sample: bytes) -> int:
    """Frames of a VP9 superframe beyond the one shown (0 for a plain frame): the superframe index's marker byte
    (0b110 then size bytes and frame count) closes the packet and opens its index."""
    if not sample:
        return 0
    marker = sample[-1]
    if marker & 0xE0 != 0xC0:
        return 0
    frames = (marker & 0x7) + 1
    index = 2 + (((marker >> 3) & 0x3) + 1) * frames
    if len(sample) < index or sample[-index] != marker:
        return 0
    return frames - 1


def leb128(data: bytes, pos: int) -> tuple[int, int]:
    """An AV1 leb128 number at `pos`: (its value, the position after it)."""
    value = 0
    for i in range(8):
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos + i + 1
    raise ValueError("an AV1 OBU size longer than 8 bytes")


def av1_obus(sample: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(obu_type, where the OBU starts, where its payload starts, where it ends) of each OBU of one AV1 temporal
    unit in the low-overhead format (an OBU without a size field runs to the end)."""
    pos = 0
    while pos < len(sample):
        start, header = pos, sample[pos]
        pos += 1 + ((header >> 2) & 1)
        size, pos = leb128(sample, pos) if (header >> 1) & 1 else (len(sample) - pos, pos)
        yield (header >> 3) & 0xF, start, pos, pos + size
        pos += size


def av1_hidden_pictures(sample: bytes) -> int:
    """Frame headers in one AV1 temporal unit (low-overhead OBUs) that do not show the picture they decode now:
    show_frame = 0 (shown later) or show_existing_frame = 1 (an earlier hidden picture shown)."""
    hidden = 0
    for obu_type, _, payload, _ in av1_obus(sample):
        if obu_type in (OBU_FRAME_HEADER, OBU_FRAME) and payload < len(sample):
            bits = sample[payload]  # uncompressed_header: show_existing_frame, then frame_type (2 bits), show_frame
            hidden += bool(bits >> 7 or not (bits >> 4) & 1)
    return hidden


def one_picture_per_packet(codec: str, samples) -> bool:
    """Whether every packet in `samples` (bytes each) decodes the one picture it shows (module doc)."""
    count = {"vp9": vp9_hidden_pictures, "av1": av1_hidden_pictures}.get(codec)
    if count is None:
        return True
    try:
        return not any(count(bytes(s)) for s in samples)
    except (IndexError, ValueError):  # bytes that do not parse: assume the worst, they are not joined
        return False
