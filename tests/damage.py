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
