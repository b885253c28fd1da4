"""Our own code or a well-kept library's? The measurements behind the choices docs/architecture.md states.

    .venv/bin/python benchmarks/library_choices.py [DATASET] [--episodes 20] [--rounds 5] [--out FILE]

DATASET defaults to the H.264 bench sample (`dali-stream bench --sample h264` writes it to .demo/bench-h264):
two 640x480 cameras, episodes of 10-20 s packed 10 to a file. In one run:

- **MP4 sample table**: `fetch.mp4index` (numpy over the `moov` bytes) against PyAV's `Stream.index_entries`
  (one Python object per sample) on the same file: equal offsets, sizes, dts and keyframes? how long each takes
  (the two alternated `--rounds` times, `_common.alternate`: median and range)?
  PyAV gives no pts (`ctts`), so adopting it would still leave the ctts and edit-list parsing here.
- **Parquet rows per episode over HTTP** (the test suite's Range server on loopback): `fetch.tables.TableReader`
  against `fsspec.parquet.open_parquet_file(..., row_groups=[g])` per episode (what a user of fsspec would
  write), and `simplecache::` (fsspec's on-disk cache) in front of plain pyarrow reads: GET requests, bytes
  served and seconds for the same episodes' rows.
- **Video bytes for one episode through `simplecache::`**: the whole packed file is downloaded, against the
  one range request of the episode's packets that `fetch.segments` makes.

Counts (requests, bytes) are exact; seconds are what to compare within the run (a shared 2-core VM varies).
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

from _common import alternate, ms_per, spread, within_rounds, write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ helpers: the Range HTTP server


def mp4_index(video: Path, repeat: int = 10, rounds: int = 5) -> dict:
    import av
    import numpy as np

    from dali_stream.fetch.mp4boxes import boxes, track_arrays

    data = video.read_bytes()
    moov = next(data[s:e] for kind, s, e in boxes(data) if kind == b"moov")
    arrays: dict = {}

    def ours() -> None:
        _, offsets, sizes, dts, _pts, _dur, sync, _stsd = track_arrays(moov, len(data))
        arrays["ours"] = offsets, sizes, dts, sync

    container = av.open(str(video))  # PyAV's index is read with the container: open once, as ours reads moov once
    stream = container.streams.video[0]

    def pyav() -> None:
        entries = stream.index_entries
        n = len(entries)
        arrays["pyav"] = (np.fromiter((e.pos for e in entries), np.int64, n),
                          np.fromiter((e.size for e in entries), np.int64, n),
                          np.fromiter((e.timestamp for e in entries), np.int64, n),
                          np.fromiter((e.is_keyframe for e in entries), bool, n))

    ways = {"ours": ours, "pyav_index_entries": pyav}

    got = alternate(list(ways), rounds, lambda name: ms_per(ways[name], repeat=repeat), say=lambda _: None)
    container.close()
    equal = {name: bool((a == b).all()) for name, a, b in zip(("offsets", "sizes", "dts", "keyframes"),
                                                               arrays["pyav"], arrays["ours"])}
    return {"file": str(video), "samples": len(arrays["ours"][0]), "rounds": rounds,
            "ours_ms": spread(r["ms"] for r in got["ours"]),
            "pyav_index_entries_ms": spread(r["ms"] for r in got["pyav_index_entries"]),
            "pyav_over_ours": within_rounds(got["pyav_index_entries"], got["ours"], "ms"),
            "equal": equal, "pyav_gives_pts": False}


def _counted(server, fn) -> dict:
    before = dict(server.counts)
    t0 = time.perf_counter()
    fn()
    return {"seconds": time.perf_counter() - t0, "requests": server.counts["get"] - before["get"],
            "bytes": server.counts["bytes"] - before["bytes"]}


def parquet_rows(dataset: Path, episodes: int) -> dict:
    import fsspec
    import fsspec.parquet
    import pyarrow.parquet as pq

    from dali_stream.fetch.tables import TableReader
    from dali_stream.meta.dataset import DatasetMeta
    from tests.support.httpserver import Server

    out = {}
    server = Server(dataset)
    with server as url:
        meta = DatasetMeta.open(url)
        positions = list(range(min(episodes, len(meta.lengths))))
        keys = list(meta.table_keys)
        reader = TableReader(meta, keys)
        out["ours"] = _counted(server, lambda: [reader.episode(p) for p in positions])
        fs = fsspec.filesystem("http")

        def groups_of(path: str, pos: int) -> list[int]:
            # the row groups holding the episode, from the footer (what a user of open_parquet_file must know)
            md = pq.ParquetFile(fs.open(path, "rb")).metadata
            start = int(meta.episodes["dataset_from_index"][pos])
            col = md.schema.names.index("index")
            hits = []
            for g in range(md.num_row_groups):
                st = md.row_group(g).column(col).statistics
                if st is None or (st.min <= start <= st.max):
                    hits.append(g)
            return hits

        groups = {p: groups_of(meta.data_file(p), p) for p in positions}

        def with_fsspec_parquet():
            for p in positions:
                with fsspec.parquet.open_parquet_file(meta.data_file(p), columns=keys,
                                                      row_groups=groups[p], engine="pyarrow") as fh:
                    pq.ParquetFile(fh).read_row_groups(groups[p], columns=keys)

        out["fsspec_parquet_open_parquet_file"] = _counted(server, with_fsspec_parquet)
        with tempfile.TemporaryDirectory() as cache:
            def with_simplecache():
                for p in positions:
                    with fsspec.open(f"simplecache::{meta.data_file(p)}", "rb",
                                     simplecache={"cache_storage": cache}) as fh:
                        pq.ParquetFile(fh).read_row_groups(groups[p], columns=keys)

            out["simplecache"] = _counted(server, with_simplecache)
        out["episodes"] = len(positions)
        out["note"] = ("ours: footer once per file (two exact ranges), then one range per episode's row group; "
                       "open_parquet_file re-reads the footer for every open; simplecache downloads whole files")
    return out


def video_bytes(dataset: Path) -> dict:
    import fsspec

    from dali_stream.fetch.indexes import IndexCache
    from dali_stream.fetch.segments import cut_segment
    from dali_stream.meta.dataset import DatasetMeta
    from tests.support.httpserver import Server

    server = Server(dataset)
    with server as url:
        meta = DatasetMeta.open(url)
        key = meta.video_keys[0]
        cam = meta.cameras[key]
        path = meta.video_file(0, key)
        start, stop = float(cam.from_timestamp[0]), float(cam.to_timestamp[0])
        indexes = IndexCache(meta.data_fs)
        # as the loader's store does: the file's index once (first 4 KB + moov), then one range per episode
        ours = _counted(server, lambda: cut_segment(
            meta.data_fs, path, start, stop, episode=0, camera=key, codec=cam.codec, tolerance_s=1e-3,
            last_frame_s=start + (int(meta.lengths[0]) - 1) / meta.fps, indexed=indexes.get(path)))
        indexes.close()
        with tempfile.TemporaryDirectory() as cache:
            def whole():
                with fsspec.open(f"simplecache::{path}", "rb", simplecache={"cache_storage": cache}) as fh:
                    fh.read(16)

            cached = _counted(server, whole)
    return {"camera": key, "file_bytes": (dataset / path[len(url) + 1:]).stat().st_size, "ours_one_episode": ours,
            "simplecache_one_episode": cached}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", nargs="?", default=".demo/bench-h264")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the two MP4 indexers, alternated")
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-480p/library_choices.json")
    args = ap.parse_args(argv)
    root = Path(args.dataset)
    if not (root / "meta/info.json").exists():
        print(f"{root} has no dataset: write it with `dali-stream bench --sample h264 --no-baseline --no-limit "
              f"--num-batches 1` (or pass a LeRobot v3 dataset)", file=sys.stderr)
        return 2
    video = sorted((root / "videos").rglob("*.mp4"))[0]
    result = {"dataset": str(root), "python": platform.python_version(),
              "mp4_index": mp4_index(video, rounds=args.rounds),
              "parquet_rows": parquet_rows(root, args.episodes), "video_bytes": video_bytes(root)}
    print(write_result(args.out, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
