"""Byte spans of files read together: spans of a file that overlap or lie closer than `max_gap` bytes are one
read, each span is served from the read that holds it, and the reads go to the store in one call (a remote one
answers them in parallel: `remote.RemoteFS.read_ranges`).

A batch's pieces (`fetch.pieces`: one per sample and camera, cut from the file's index) are read this way: the
pieces of a window's frames, of samples drawn from one long episode, or of a frame drawn twice overlap or sit a
GOP apart, and a read costs a request (latency, and on object stores a fee) where a few KB more cost nothing."""

from __future__ import annotations

COALESCE_GAP_BYTES = 1 << 16  # a read on a far-away store costs ~50 ms; 64 KB more of it costs well under 1 ms


def coalesce(spans: list[tuple[str, int, int]],
             max_gap: int = COALESCE_GAP_BYTES) -> list[tuple[str, int, int, list[int]]]:
    """The reads covering `spans` ((path, start, end): bytes [start, end) of the file): (path, start, end, the
    indices of the spans it holds), by path and offset; spans of a file whose gap is at most `max_gap` bytes
    share a read."""
    reads: list[tuple[str, int, int, list[int]]] = []
    for i in sorted(range(len(spans)), key=spans.__getitem__):
        path, start, end = spans[i]
        if reads and reads[-1][0] == path and start <= reads[-1][2] + max_gap:
            _, first, last, held = reads[-1]
            reads[-1] = (path, first, max(last, end), held + [i])
        else:
            reads.append((path, start, end, [i]))
    return reads


def read_spans(ranges, spans: list[tuple[str, int, int]],
               max_gap: int = COALESCE_GAP_BYTES) -> list[tuple[int, bytes]]:
    """Per span, (file offset, bytes read from there) holding it: `ranges` (a `remote.RemoteFS` or
    `storage.LocalRanges`) reads the coalesced spans in one `read_ranges` call."""
    reads = coalesce(spans, max_gap)
    got = ranges.read_ranges([(path, start, end) for path, start, end, _ in reads])
    out: list[tuple[int, bytes]] = [(0, b"")] * len(spans)
    for (_, start, _, held), data in zip(reads, got):
        for i in held:
            out[i] = (start, data)
    return out
