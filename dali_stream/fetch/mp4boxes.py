"""The video track's sample tables in an MP4's `moov` box, read into per-sample arrays with every size, count and
offset the file states checked first: every box size bounded by its parent's and the file's, every table's entry
count by the bytes its box holds, every run-length table's runs by the track's sample count, every sample's bytes by the file's end, before anything of the stated size is allocated or read (a
`ctts` whose runs claimed 12.9 G samples once asked numpy for 96 GiB). A contradiction raises `Damaged` (the box
that says so); a layout these readers do not handle (fragmented, several edits, no video track, `stz2`, runs that
cover fewer samples than the track) `IndexUnsupported`, and the file is read through the demuxer.
`mp4index` builds the compact index from these arrays."""

from __future__ import annotations

import struct

import numpy as np


class IndexUnsupported(Exception):
    """The file's layout is not one this index handles (the caller falls back to plain range reads)."""


class Damaged(Exception):
    """The file's boxes contradict themselves or its length (`part`: the box that says so). `read_index` names the
    file (`errors.DamagedVideoError`); checked before anything of the stated size is allocated or read."""

    def __init__(self, part: str, why: str) -> None:
        super().__init__(f"{part} box: {why}")
        self.part, self.why = part, why


def box_name(kind: bytes) -> str:
    """A box type as errors name it: its four letters, or for bytes no box type has (damage) their hex digits."""
    text = kind.decode("latin-1")
    return text if text.isascii() and text.isalnum() else f"unreadable 0x{kind.hex()}"


def boxes(buf: bytes, start: int = 0, end: int | None = None):
    """(type, payload start, box end) of the boxes in buf[start:end]; a box that declares more bytes than its
    parent holds from where it starts is damage (FFmpeg trims such a box to its parent and reads on; here it is named,
    since what lies past the parent's end is not the box's: at the top level, a file truncated)."""
    end = len(buf) if end is None else end
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", buf, pos)
        head = 8
        if size == 1:
            if pos + 16 > end:
                raise Damaged(box_name(kind), f"its 64-bit size lies past its parent's end ({end - pos} bytes left)")
            size = struct.unpack_from(">Q", buf, pos + 8)[0]
            head = 16
        elif size == 0:
            size = end - pos
        if size < head:
            raise Damaged(box_name(kind), f"at byte {pos} declares {size} bytes, less than its own header")
        if pos + size > end:
            raise Damaged(box_name(kind), f"at byte {pos} declares {size} bytes where its parent holds {end - pos}")
        yield kind, pos + head, pos + size
        pos += size


def _find(buf: bytes, start: int, end: int, *path: bytes) -> list[tuple[int, int]]:
    """Payload (start, end) of every box at `path` below buf[start:end]."""
    found = [(start, end)]
    for kind in path:
        found = [(s, e) for ps, pe in found for k, s, e in boxes(buf, ps, pe) if k == kind]
    return found


def _table(buf: bytes, box: tuple[int, int], kind: str, fmt: str, fields: int) -> np.ndarray:
    """A full box's entry table (version/flags, a 32-bit count, `count` entries of `fields` values): the count is
    checked against the bytes the box holds before the table is read."""
    start, end = box
    if start + 8 > end:
        raise Damaged(kind, f"holds {end - start} bytes, too few for its entry count")
    count = struct.unpack_from(">I", buf, start + 4)[0]
    width = np.dtype(fmt).itemsize * fields
    if count > (end - start - 8) // width:
        raise Damaged(kind, f"declares {count} entries; its {end - start - 8} bytes hold "
                            f"{(end - start - 8) // width}")
    arr = np.frombuffer(buf, dtype=np.dtype(fmt), count=count * fields, offset=start + 8)
    return arr.astype(np.int64).reshape(count, fields)


def _runs(table: np.ndarray, count: int, kind: str) -> np.ndarray:
    """Each of `count` samples' value from a run-length table (stts, ctts: rows of (samples, value)). A run other than
    the last that is longer than the whole track is damage (runs after it would describe samples that do not exist:
    a `ctts` whose runs claimed 12.9 G samples once asked numpy for 96 GiB); runs that cover more samples than the
    track are cut at `count` before anything is allocated, as FFmpeg cuts them (a last run one sample long is a
    muxer's rounding); fewer is a layout this index leaves to the demuxer (FFmpeg repeats the last duration)."""
    lengths = table[:, 0]
    if len(lengths) > 1 and int(lengths[:-1].max()) > count:
        raise Damaged(kind, f"a run of {int(lengths[:-1].max())} samples in a track of {count} (stsz), with runs "
                            "after it")
    ends = np.minimum(np.cumsum(lengths), count)
    if count and (len(ends) == 0 or int(ends[-1]) < count):
        raise IndexUnsupported(f"{kind} runs cover {int(ends[-1]) if len(ends) else 0} of the {count} samples")
    return np.repeat(table[:, 1], np.diff(ends, prepend=0))


def _box(moov: bytes, within: tuple[int, int], kind: bytes, *, needed: bool = True) -> tuple[int, int] | None:
    hit = _find(moov, *within, kind)
    if not hit and needed:
        raise Damaged(box_name(kind), "missing from the video track")
    return hit[0] if hit else None


def _sample_sizes(moov: bytes, stsz: tuple[int, int], limit: int) -> np.ndarray:
    """Every sample's size (stsz), its count checked against the box's bytes and the sizes against the file's."""
    if stsz[0] + 12 > stsz[1]:
        raise Damaged("stsz", f"holds {stsz[1] - stsz[0]} bytes, too few for its header")
    fixed, count = struct.unpack_from(">II", moov, stsz[0] + 4)
    if fixed:
        if count * fixed > limit:
            raise Damaged("stsz", f"declares {count} samples of {fixed} bytes; the file has {limit}")
        return np.full(count, fixed, np.int64)
    if count > (stsz[1] - stsz[0] - 12) // 4:
        raise Damaged("stsz", f"declares {count} samples; its {stsz[1] - stsz[0] - 12} bytes hold "
                              f"{(stsz[1] - stsz[0] - 12) // 4}")
    sizes = np.frombuffer(moov, ">u4", count, stsz[0] + 12).astype(np.int64)
    if count and int(sizes.sum()) > limit:
        raise Damaged("stsz", f"its samples add up to {int(sizes.sum())} bytes; the file has {limit}")
    return sizes


def _chunk_counts(stsc: np.ndarray, chunks: int, count: int) -> np.ndarray:
    """Samples in each of `chunks` chunks (stsc rows: first chunk, 1-based, samples per chunk, description), cut at
    `count` samples in all."""
    if count == 0:
        return np.zeros(chunks, np.int64)
    firsts = stsc[:, 0] - 1
    if len(firsts) == 0 or firsts[0] != 0 or np.any(np.diff(firsts) <= 0) or firsts[-1] >= max(chunks, 1):
        raise Damaged("stsc", f"its first chunks {firsts[:4].tolist()}... do not rise from 1 within the "
                              f"{chunks} chunks of stco")
    if len(stsc) and int(stsc[:, 1].max()) > count:
        raise Damaged("stsc", f"{int(stsc[:, 1].max())} samples a chunk in a track of {count}")
    per_chunk = np.repeat(stsc[:, 1], np.diff(np.append(firsts, chunks)))
    ends = np.minimum(np.cumsum(per_chunk), count)
    if len(ends) == 0 or int(ends[-1]) < count:
        raise Damaged("stsc", f"its chunks hold {int(ends[-1]) if len(ends) else 0} samples; the track has {count}")
    return np.diff(ends, prepend=0)


def _shift(moov: bytes, trak: tuple[int, int]) -> int:
    """The media time the track's one edit starts at (elst), 0 without an edit list."""
    elst = _find(moov, *trak, b"edts", b"elst")
    if not elst:
        return 0
    start, end = elst[0]
    if start + 8 > end:
        raise Damaged("elst", f"holds {end - start} bytes, too few for its entry count")
    version = moov[start]
    entries = struct.unpack_from(">I", moov, start + 4)[0]
    fmt, width = (">Qq", 16) if version == 1 else (">Ii", 8)
    if entries > (end - start - 8) // (width + 4):
        raise Damaged("elst", f"declares {entries} edits; its {end - start - 8} bytes hold "
                              f"{(end - start - 8) // (width + 4)}")
    edits = [struct.unpack_from(fmt, moov, start + 8 + k * (width + 4)) for k in range(entries)]
    media = [m for _, m in edits if m >= 0]
    if len(media) != 1:
        raise IndexUnsupported(f"edit list with {entries} entries")
    return media[0]


def track_arrays(moov: bytes, limit: int) -> tuple:
    """The video track's arrays; `limit`: the file's size in bytes, which bounds every size, count and offset."""
    try:
        return _checked_track(moov, limit)
    except (Damaged, IndexUnsupported):
        raise
    except (struct.error, IndexError, ValueError) as exc:  # a field past its box: what the checks above missed
        raise Damaged("moov", f"{type(exc).__name__}: {exc}") from None


def _checked_track(moov: bytes, limit: int) -> tuple:
    if _find(moov, 0, len(moov), b"mvex"):
        raise IndexUnsupported("fragmented MP4 (moov/mvex)")
    for trak in _find(moov, 0, len(moov), b"trak"):
        hdlr = _find(moov, *trak, b"mdia", b"hdlr")
        if not hdlr or moov[hdlr[0][0] + 8:hdlr[0][0] + 12] != b"vide":
            continue
        mdhd = _box(moov, _find(moov, *trak, b"mdia")[0], b"mdhd")[0]  # type: ignore[index]
        timescale = struct.unpack_from(">I", moov, mdhd + (20 if moov[mdhd] == 1 else 12))[0]
        if timescale == 0:
            raise Damaged("mdhd", "a timescale of 0 ticks a second")
        stbl = _find(moov, *trak, b"mdia", b"minf", b"stbl")
        if not stbl:
            raise Damaged("stbl", "missing from the video track")

        def box(kind: bytes, needed: bool = True):
            return _box(moov, stbl[0], kind, needed=needed)

        if box(b"stsz", False) is None and box(b"stz2", False) is not None:
            raise IndexUnsupported("compact sample sizes (stz2)")
        sizes = _sample_sizes(moov, box(b"stsz"), limit)
        count = len(sizes)
        deltas = _runs(_table(moov, box(b"stts"), "stts", ">u4", 2), count, "stts")
        dts = np.concatenate([[0], np.cumsum(deltas)[:-1]]).astype(np.int64)
        ctts_box = box(b"ctts", False)
        if ctts_box is not None:
            fmt = ">i4" if moov[ctts_box[0]] == 1 else ">u4"
            comp = _runs(_table(moov, ctts_box, "ctts", fmt, 2), count, "ctts")
        else:
            comp = np.zeros(count, np.int64)
        stss_box = box(b"stss", False)
        sync = np.ones(count, bool) if stss_box is None else np.zeros(count, bool)
        if stss_box is not None:
            keys = _table(moov, stss_box, "stss", ">u4", 1)[:, 0]
            if len(keys) and (int(keys.min()) < 1 or int(keys.max()) > count):
                raise Damaged("stss", f"names sample {int(keys.max()) if keys.max() > count else int(keys.min())}"
                                      f" of a track of {count} (1-based)")
            sync[keys - 1] = True
        co = box(b"stco", False) or box(b"co64", False)
        if co is None:
            raise Damaged("stco", "missing from the video track (nor co64)")
        chunk_offsets = _table(moov, co, "stco", ">u4" if box(b"stco", False) else ">u8", 1)[:, 0]
        per_chunk = _chunk_counts(_table(moov, box(b"stsc"), "stsc", ">u4", 3), len(chunk_offsets), count)
        chunk_of = np.repeat(np.arange(len(chunk_offsets)), per_chunk)
        first_in_chunk = np.concatenate([[0], np.cumsum(per_chunk)[:-1]])
        csum = np.concatenate([[0], np.cumsum(sizes)])
        offsets = chunk_offsets[chunk_of] + csum[np.arange(count)] - csum[first_in_chunk[chunk_of]]
        if count and int((offsets + sizes).max()) > limit:
            late = int(np.argmax(offsets + sizes > limit))
            raise Damaged("stco", f"sample {late} lies at bytes {int(offsets[late])}-{int(offsets[late] + sizes[late])}"
                                  f", past the file's end ({limit} bytes): the file is truncated or its offsets damaged")
        shift = _shift(moov, trak)
        stsd_start, stsd_end = box(b"stsd")
        stsd = moov[stsd_start - 8:stsd_end]
        if struct.unpack_from(">I4s", stsd)[1] != b"stsd":
            raise IndexUnsupported("stsd box with a 64-bit size")
        return timescale, offsets.astype(np.int64), sizes, dts - shift, dts + comp - shift, deltas, sync, stsd
    raise IndexUnsupported("no video track")


def track_of(data: bytes) -> tuple:
    """The video track's arrays (as `Mp4Index` holds them, then its `stsd` box) of a whole MP4 in memory."""
    for kind, start, end in boxes(data):
        if kind == b"moov":
            return track_arrays(data[start:end], len(data))
    raise IndexUnsupported("no moov box")
