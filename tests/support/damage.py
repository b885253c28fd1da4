"""Ways tests damage a copied dataset's files (not a test module)."""

from __future__ import annotations


def scramble_keyframes(path) -> None:
    """Scramble every keyframe's payload past its first 12 bytes; the MP4 index stays intact."""
    import av

    with av.open(str(path)) as container:
        packets = [(p.pos, p.size) for p in container.demux(container.streams.video[0]) if p.size and p.is_keyframe]
    data = bytearray(path.read_bytes())
    for pos, size in packets:
        data[pos + 12:pos + size] = bytes((b * 7 + 13) & 0xFF for b in data[pos + 12:pos + size])
    path.write_bytes(bytes(data))


def scribble_frames(path, writes: int = 4, size: int = 16, seed: int = 0) -> None:
    """`writes` random `size`-byte writes inside the MP4's frame data (mdat): the index stays intact, and
    decoders conceal the damage as other pixels."""
    import random

    data = bytearray(path.read_bytes())
    start = data.find(b"mdat") + 4
    moov = data.find(b"moov")
    end = moov - 8 if moov > start else len(data)
    rnd = random.Random(seed)
    for _ in range(writes):
        at = rnd.randrange(start + 64, end - size)
        data[at:at + size] = bytes(rnd.randrange(256) for _ in range(size))
    path.write_bytes(bytes(data))


# ---- the damaged-MP4 battery: every box the index reads, made to contradict itself ----------------------------
WALKED = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts"}  # containers whose children the index walks
# full boxes whose payload is (version/flags, a 32-bit count, entries of this many bytes); stsz has a sample size
# before its count
TABLES = {b"stts": 8, b"ctts": 8, b"stss": 4, b"stsc": 12, b"stco": 4, b"co64": 8, b"elst": 12}


def mp4_boxes(data: bytes, start: int = 0, end: int | None = None):
    """Every box the MP4 index reads: (kind, offset, size, its parent's end), in file order: the top-level boxes up
    to `moov`, and the children of the containers it walks (`WALKED`)."""
    import struct

    end = len(data) if end is None else end
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, pos)
        head = 8
        if size == 1:
            size, head = struct.unpack_from(">Q", data, pos + 8)[0], 16
        elif size == 0:
            size = end - pos
        yield kind, pos, size, end
        if kind in WALKED:
            yield from mp4_boxes(data, pos + head, pos + size)
        if kind == b"moov" and start == 0:
            return
        pos += size


def _put(data: bytes, at: int, fmt: str, value: int) -> bytes:
    import struct

    out = bytearray(data)
    struct.pack_into(fmt, out, at, value % (1 << (8 * struct.calcsize(fmt))))
    return bytes(out)


def damaged_mp4s(data: bytes):
    """(what was damaged, the damaged file's bytes) for a one-track MP4: each a contradiction of the file with itself
    that its index must find (a box larger than its parent or smaller than its header, a table counting more entries
    than its box holds, a run before the last longer than the track, offsets and sizes past the file's end, a zero timescale,
    truncations), at every box the index reads. (Runs that cover more or fewer samples than the track are not here:
    FFmpeg reads such files, and so does the loader: cut at the track, or through the demuxer.)"""
    import struct

    for kind, pos, size, parent_end in mp4_boxes(data):
        name = kind.decode("latin-1")
        room = parent_end - pos
        for label, value in (("one byte past its parent", room + 1), ("twice its parent", 2 * room + 8),
                             ("4 GiB", 0xFFFFFFFF), ("7 bytes", 7), ("2 bytes", 2)):
            yield f"{name} size {label}", _put(data, pos, ">I", value)
        if kind in TABLES or kind == b"stsz":
            at = pos + 8 + (8 if kind == b"stsz" else 4)  # the entry count
            count = struct.unpack_from(">I", data, at)[0]
            width = TABLES.get(kind, 4)
            held = (pos + size - at - 4) // width
            for label, value in (("4 G entries", 0xFFFFFFFF), ("2 G entries", 0x7FFFFFFF),
                                 ("one entry more than it holds", held + 1), ("1000 times its entries", count * 1000 + 1)):
                if value > held:
                    yield f"{name} count {label}", _put(data, at, ">I", value)
            if kind == b"stco" and count:
                yield f"{name} count one fewer", _put(data, at, ">I", count - 1)
        if kind in (b"stts", b"ctts") and size >= 24:
            first = pos + 16
            runs = struct.unpack_from(">I", data, first)[0]
            entries = struct.unpack_from(">I", data, pos + 12)[0]
            if entries > 1:  # a last run that outcounts the track is cut there, as FFmpeg cuts it: not damage
                bad = data
                for k in range(min(3, entries - 1)):  # three runs of 4 G samples: 12.9 G samples, 96 GiB as int64
                    bad = _put(bad, first + 8 * k, ">I", 0xFFFFFFFF)
                yield f"{name} {min(3, entries - 1)} runs of 4 G samples", bad
                yield f"{name} first run longer than the track", _put(data, first, ">I", runs + (1 << 20))
        if kind == b"stsz":
            count = struct.unpack_from(">I", data, pos + 16)[0]
            yield "stsz a fixed size of 4 GiB", _put(data, pos + 12, ">I", 0xFFFFFFFF)
            if count:
                yield "stsz first sample 4 GiB", _put(data, pos + 20, ">I", 0xFFFFFFFF)
                yield "stsz last sample the file's size", _put(data, pos + 20 + 4 * (count - 1), ">I", len(data))
        if kind == b"stco":
            yield "stco first chunk past the file's end", _put(data, pos + 16, ">I", len(data))
            yield "stco first chunk at 4 GiB", _put(data, pos + 16, ">I", 0xFFFFFFF0)
        if kind == b"co64":
            yield "co64 first chunk at 2^62", _put(data, pos + 16, ">Q", 1 << 62)
        if kind == b"stsc":
            yield "stsc first chunk 0", _put(data, pos + 16, ">I", 0)
            yield "stsc first chunk 4 G", _put(data, pos + 16, ">I", 0xFFFFFFFF)
            yield "stsc 4 G samples a chunk", _put(data, pos + 20, ">I", 0xFFFFFFFF)
        if kind == b"stss":
            yield "stss keyframe 0", _put(data, pos + 16, ">I", 0)
            yield "stss keyframe 4 G", _put(data, pos + 16, ">I", 0xFFFFFFFF)
        if kind == b"mdhd":
            yield "mdhd timescale 0", _put(data, pos + 8 + (20 if data[pos + 8] == 1 else 12), ">I", 0)
    for k in range(1, 48):  # truncations, from the first box's header to the last sample's bytes
        cut = len(data) * k // 48
        yield f"truncated at {cut} of {len(data)} bytes", data[:cut]
    yield "truncated to 12 bytes", data[:12]
