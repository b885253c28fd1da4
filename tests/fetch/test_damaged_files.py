"""Damaged files are named errors, in bounded memory and time: every box the MP4 index reads made to contradict
itself (sizes, counts, runs, offsets, truncations; `tests/support/damage.py`), and parquet footers, through the index, the
loader and `dali-stream verify`, each in a child process whose address space is capped (`RLIMIT_AS`): a file that
asks for more than the cap fails the test with a MemoryError instead of being named."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.damage import damaged_mp4s, mp4_boxes

REPO = Path(__file__).resolve().parents[2]
HEADROOM = 2 << 30  # bytes of address space a child may take beyond what it holds once its imports are done
CAP = f"""
import resource
def cap():
    with open("/proc/self/status") as f:
        held = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (held + {HEADROOM}, resource.RLIM_INFINITY))
"""


def _child(code: str, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (it calls `cap()` once its imports are done), within `timeout_s`."""
    return subprocess.run([sys.executable, "-c", CAP + textwrap.dedent(code), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout_s)


def _mp4s(root: Path) -> list[Path]:
    return sorted(root.glob("videos/*/*/*.mp4"))


def test_the_battery_damages_every_box_the_index_reads(four_codec_dataset):
    """The generator itself: per codec, over 200 damaged files, at every box the index walks or reads."""
    data = _mp4s(four_codec_dataset)[0].read_bytes()
    kinds = {k for k, *_ in mp4_boxes(data)}
    assert {b"ftyp", b"mdat", b"moov", b"trak", b"mdia", b"mdhd", b"hdlr", b"minf", b"stbl", b"stsd", b"stts",
            b"ctts", b"stss", b"stsz", b"stsc", b"stco", b"edts", b"elst"} <= kinds
    damaged = list(damaged_mp4s(data))
    assert len(damaged) >= 200
    assert all(d != data for _, d in damaged)
    assert {label.split()[0] for label, _ in damaged} >= {k.decode() for k in kinds}


def test_every_damaged_mp4_is_named_by_the_index_in_bounded_memory(four_codec_dataset, tmp_path):
    """Over 800 damaged files of four codecs (H.264 with B-frames, HEVC, AV1, VP9): each a DamagedVideoError naming
    the file and the box, none asking for more memory than the cap (a `ctts` run of 12.9 G samples asked numpy for
    96 GiB), all within the timeout."""
    files = [_mp4s(four_codec_dataset)[i] for i in (0, 2, 5, 8)]  # front h264, side hevc, top vp9, wrist av1
    code = """
    import json, sys
    sys.path.insert(0, ".")
    from dali_stream.errors import DamagedVideoError
    from dali_stream.fetch.mp4index import read_index
    from tests.support.damage import damaged_mp4s

    class Bytes:  # a file system of one file, as the loader's RemoteFS reads it
        def __init__(self, data): self.data = data
        def size(self, path): return len(self.data)
        def read_range(self, path, start, end): return self.data[start:end]

    cap()
    out = []
    for path in sys.argv[1:]:
        data = open(path, "rb").read()
        read_index(Bytes(data), path)  # the whole file indexes
        for label, bad in damaged_mp4s(data):
            try:
                read_index(Bytes(bad), path)
                out.append((path, label, "no error", ""))
            except DamagedVideoError as exc:
                out.append((path, label, "named" if exc.path == path and exc.part and path in str(exc) else
                            "unnamed", str(exc)))
            except BaseException as exc:
                out.append((path, label, type(exc).__name__, str(exc)[:200]))
    print(json.dumps(out))
    """
    ran = _child(code, *map(str, files))
    assert ran.returncode == 0, ran.stderr[-3000:]
    results = json.loads(ran.stdout)
    assert len(results) >= 4 * 180
    wrong = [r for r in results if r[2] != "named"]
    assert not wrong, f"{len(wrong)} of {len(results)} damaged files not named: {wrong[:10]}"
    assert any(r[1] == "ctts 3 runs of 4 G samples" for r in results)


def _damaged_copy(dataset: Path, tmp_path: Path, name: str) -> tuple[Path, Path]:
    copy = tmp_path / name
    shutil.copytree(dataset, copy)
    return copy, _mp4s(copy)[0]  # the front camera's first file (H.264 with B-frames)


LOADER = """
import sys
sys.path.insert(0, ".")
from pathlib import Path
from dali_stream import StreamLoader
from dali_stream.errors import DamagedTableError, DamagedVideoError
from tests.support.damage import damaged_mp4s
from tests.fetch.test_damaged_files import damaged_parquets

root, target, kind = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
healthy = target.read_bytes()
if kind == "mp4":
    expected, picked, seen = DamagedVideoError, [], set()
    for label, bad in damaged_mp4s(healthy):  # one damage of each kind at each box
        if " ".join(label.split(" ")[:2]) not in seen:
            seen.add(" ".join(label.split(" ")[:2]))
            picked.append((label, bad))
else:
    expected, picked = DamagedTableError, list(damaged_parquets(healthy))
with StreamLoader(root, batch_size=4, device="cpu", num_workers=1, shuffle=False) as loader:
    next(iter(loader))  # the healthy file: torchcodec, FFmpeg and the threads loaded before the cap
cap()
named = 0
for label, bad in picked:
    target.write_bytes(bad)
    try:
        with StreamLoader(root, batch_size=4, device="cpu", num_workers=1, shuffle=False) as loader:
            for _ in loader:
                pass
        print("NO ERROR", label)
    except expected as exc:
        assert exc.path == str(target) and str(target) in str(exc), exc
        named += 1
    except Exception as exc:
        print("UNNAMED", label, type(exc).__name__, str(exc)[:300])
print("named", named, "of", len(picked))
"""


def test_the_loader_names_a_damaged_mp4_in_bounded_memory(small_dataset, tmp_path):
    """The loader over a dataset with one damaged file, one damage of each kind at each box: a DamagedFileError
    naming the file, within the memory cap, for every one."""
    root, target = _damaged_copy(small_dataset, tmp_path, "damaged")
    ran = _child(LOADER, str(root), str(target), "mp4", timeout_s=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    last = ran.stdout.strip().splitlines()[-1].split()
    assert last[0] == "named" and last[1] == last[3] and int(last[1]) >= 40, ran.stdout[-3000:]


def _verify(root: Path, target: Path, bad: bytes) -> tuple[int, dict]:
    """`verify` of `root` with `target`'s bytes replaced by `bad`, under the memory cap (set once a loader has read a
    batch of the healthy dataset: torchcodec, FFmpeg, DALI and the threads are loaded before it)."""
    code = """
    import json, sys
    sys.path.insert(0, ".")
    from pathlib import Path
    from dali_stream import StreamLoader
    from dali_stream.tools.verify import verify
    with StreamLoader(sys.argv[1], batch_size=4, device="cpu", num_workers=1, shuffle=False) as loader:
        next(iter(loader))
    Path(sys.argv[2]).write_bytes(Path(sys.argv[3]).read_bytes())
    cap()
    print(json.dumps(verify(sys.argv[1])))
    """
    damaged = root.parent / "damaged.bytes"
    damaged.write_bytes(bad)
    ran = _child(code, str(root), str(target), str(damaged), timeout_s=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads(ran.stdout.strip().splitlines()[-1])
    return report["exit_code"], report


@pytest.mark.parametrize("damage", ["ctts 3 runs of 4 G samples", "truncated at"])
def test_verify_names_exactly_the_damaged_mp4(small_dataset, tmp_path, damage):
    """`verify` on a dataset with one damaged camera file (a `ctts` run that once asked for 96 GiB; a truncation)
    lists that file alone, within the memory cap: the other cameras' files of the same episodes are healthy."""
    root, target = _damaged_copy(small_dataset, tmp_path, "one")
    bad = next(b for label, b in damaged_mp4s(target.read_bytes()) if label.startswith(damage))
    code, report = _verify(root, target, bad)
    assert code == 1
    assert [f["file"] for f in report["damaged"]] == [str(target.relative_to(root))], report["damaged"]


def test_verify_names_exactly_the_damaged_parquet(small_dataset, tmp_path):
    """A data file's footer damaged: `verify` lists that parquet file alone (not the videos of its episodes)."""
    root = tmp_path / "pq"
    shutil.copytree(small_dataset, root)
    data = sorted(root.glob("data/*/*.parquet"))[0]
    raw = bytearray(data.read_bytes())
    raw[-200:-8] = bytes(192)  # the footer's last bytes zeroed, its length and magic kept
    code, report = _verify(root, data, bytes(raw))
    assert code == 1
    assert [f["file"] for f in report["damaged"]] == [str(data.relative_to(root))], report["damaged"]


def damaged_parquets(data: bytes):
    """(what was damaged, bytes) of a parquet file: its footer's length lying (past the file, zero, one byte off),
    its footer's bytes zeroed or flipped in parts, its magic bytes, truncations."""
    import struct

    length = struct.unpack("<I", data[-8:-4])[0]
    for label, value in (("past the file", len(data) + 1), ("4 GiB", 0xFFFFFFFF), ("zero", 0),
                         ("one more", length + 1), ("one less", length - 1), ("half", length // 2)):
        yield f"footer length {label}", data[:-8] + struct.pack("<I", value) + data[-4:]
    start = len(data) - 8 - length
    for k in range(8):
        at = start + length * k // 8
        yield f"footer bytes {at}..{at + 16} flipped", data[:at] + bytes(b ^ 0xFF for b in data[at:at + 16]) + \
            data[at + 16:]
    yield "end magic", data[:-4] + b"PAR0"
    for k in range(1, 8):
        yield f"truncated at {len(data) * k // 8}", data[:len(data) * k // 8]


def test_the_loader_names_a_damaged_parquet_footer(small_dataset, tmp_path):
    """A data file's footer damaged in 22 ways: each a DamagedTableError naming the file (or, where the damage
    leaves a readable footer, the right rows): never another exception, never past the memory cap."""
    root = tmp_path / "footer"
    shutil.copytree(small_dataset, root)
    target = sorted(root.glob("data/*/*.parquet"))[0]
    ran = _child(LOADER, str(root), str(target), "parquet", timeout_s=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "UNNAMED" not in ran.stdout, ran.stdout[-3000:]
    assert int(ran.stdout.strip().splitlines()[-1].split()[1]) >= 15, ran.stdout[-3000:]


def test_a_time_table_that_outcounts_the_track_is_read_as_ffmpeg_reads_it(small_dataset, tmp_path):
    """Not every contradiction is damage a reader must refuse: an `stts` whose (last) run covers one sample more than
    the track (a muxer's rounding) is cut at the track, as FFmpeg cuts it, and every painted frame reads right."""
    import struct

    from tests.loader.test_boundaries import check_every_frame

    root, target = _damaged_copy(small_dataset, tmp_path, "sloppy")
    data = target.read_bytes()
    pos = next(p for k, p, *_ in mp4_boxes(data) if k == b"stts")
    entries, runs = struct.unpack_from(">II", data, pos + 12)
    assert entries == 1  # one run: every frame 1/30 s
    data = data[:pos + 16] + struct.pack(">I", runs + 1) + data[pos + 20:]
    target.write_bytes(data)
    check_every_frame(root, 30, ["front", "top"], decode="cpu", windowed=False)
