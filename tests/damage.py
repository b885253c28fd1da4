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
