"""Resident memory along a long run over a dataset with many video files: does everything the loader keeps per
file stay inside its settings?

    .venv/bin/python benchmarks/scale_video.py [--episodes 200000] [--batches 9600] [--out results.json]

The dataset (written once under `.demo/scale-video/`, ~2 GB): `benchmarks/scale.py`'s camera-less tables
(1,000 episodes a data file, one row group an episode) with episodes of 20-60 frames (~8.1 million frames at
200,000 episodes) and one 64x64 H.264 camera, one MP4 per 1,000 episodes as lerobot's recorder packs them (GOP 2,
crf 30, B-frames: `tools/lerobot_recorder.encode_episode`). Encoding 8 million frames would take the better part
of an hour here, so one 600-frame clip is encoded and its packets are laid end to end (each copy starts at a
keyframe: GOPs are closed), with the copies' timestamps continuing; the files carry ~40,500 frames each, as a
recorder's would, with sample tables of that size.

The run: batch 16, a pool of 16 episodes, a 16-step action window, 2 workers, `cache_bytes` 256 MiB (the
memory-bound measurement's settings), `--batches` batches of one epoch; the process's RSS (psutil) and
`loader.stats()`'s bounded structures (where the loader has it) after batch 150, 2,400, 4,800, 7,200 and the last.
Run it on two commits to compare them (PYTHONPATH at each tree: the dataset is written by the first and reused).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import FPS, PER_FILE, rss_mb, write_dataset  # noqa: E402

ROOT = Path(".demo/scale-video")
KEY = "observation.images.cam"
SIDE = 64
CLIP = 600  # frames of the encoded clip whose packets are laid end to end
CHECKPOINTS = (150, 2400, 4800, 7200)


def _clip(work: Path):
    """The 600-frame clip's index and its samples' bytes in decode order."""
    import fsspec

    from dali_stream.fetch.mp4index import read_index
    from dali_stream.source.storage import LocalRanges
    from dali_stream.tools.lerobot_recorder import LEROBOT_CRF, encode_episode

    path = work / "clip.mp4"
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:SIDE, 0:SIDE]
    frames = (np.stack([(xx * 4 + k * 3 + c * 40 + rng.integers(0, 24, (SIDE, SIDE))) % 256
                        for c in range(3)], axis=-1).astype(np.uint8) for k in range(CLIP))
    encode_episode(path, frames, "h264", FPS, 2, LEROBOT_CRF, "yuv420p", SIDE, SIDE)
    index = read_index(LocalRanges(fsspec.filesystem("file")), str(path))
    data = path.read_bytes()
    samples = [data[o:o + s] for o, s in zip(index.offsets.tolist(), index.sizes.tolist())]
    return index, samples


def _file(index, samples: list[bytes], frames: int) -> bytes:
    """An MP4 of at least `frames` frames: the clip's packets repeated, cut after a whole GOP."""
    from dali_stream.fetch.mp4write import write_mp4

    repeats = math.ceil(frames / CLIP)
    step = int(index.pts[-1] - index.pts[0]) + int(index.durations[-1])  # the clip's span in ticks
    shift = np.repeat(np.arange(repeats, dtype=np.int64) * step, CLIP)
    keys = np.flatnonzero(np.tile(index.sync, repeats))
    stop = int(keys[np.searchsorted(keys, frames)]) if keys[-1] >= frames else CLIP * repeats
    sizes = np.tile(index.sizes, repeats)[:stop]
    return write_mp4(index.stsd, index.timescale, sizes, (np.tile(index.dts, repeats) + shift)[:stop],
                     (np.tile(index.pts, repeats) + shift)[:stop], np.tile(index.durations, repeats)[:stop],
                     np.tile(index.sync, repeats)[:stop], b"".join(samples * repeats)[:int(sizes.sum())])


def write_video_dataset(root: Path, episodes: int) -> Path:
    """`scale.write_dataset`'s tables, episodes of 20-60 frames, and one H.264 camera (module doc)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if (root / "meta" / "info.json").exists():
        return root
    partial = root.with_name(root.name + ".partial")
    tables = write_dataset(partial.with_name(root.name + ".tables"), episodes, lengths=(20, 61))
    tables.rename(partial)
    episodes_file = partial / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(episodes_file)
    lengths = table["length"].to_numpy()
    files = np.arange(episodes) // PER_FILE
    starts = np.zeros(episodes)
    for f in range(files[-1] + 1):
        mine = files == f
        starts[mine] = np.concatenate([[0], np.cumsum(lengths[mine])[:-1]]) / FPS
    index, samples = _clip(partial)
    for f in range(files[-1] + 1):
        path = partial / "videos" / KEY / f"chunk-{f // 1000:03d}" / f"file-{f % 1000:03d}.mp4"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_file(index, samples, int(lengths[files == f].sum())))
        print(f"\rvideo files {f + 1}/{files[-1] + 1}", end="", flush=True)
    print()
    (partial / "clip.mp4").unlink()
    p = f"videos/{KEY}/"
    for name, values in ((p + "chunk_index", files // 1000), (p + "file_index", files % 1000),
                         (p + "from_timestamp", starts), (p + "to_timestamp", starts + lengths / FPS)):
        table = table.append_column(name, pa.array(values))
    pq.write_table(table, episodes_file)
    info = json.loads((partial / "meta" / "info.json").read_text())
    info["features"][KEY] = {
        "dtype": "video", "shape": [SIDE, SIDE, 3], "names": ["height", "width", "channels"],
        "info": {"video.height": SIDE, "video.width": SIDE, "video.codec": "h264", "video.pix_fmt": "yuv420p",
                 "video.is_depth_map": False, "video.fps": FPS, "video.channels": 3, "has_audio": False}}
    info["video_path"] = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    (partial / "meta" / "info.json").write_text(json.dumps(info))
    partial.rename(root)
    return root


def measure(root: Path, batches: int) -> dict:
    from dali_stream import StreamLoader

    loader = StreamLoader(str(root), batch_size=16, episode_pool_size=16, num_workers=2, device="cpu",
                          image_dtype="uint8", cache_bytes=256 << 20,
                          delta_timestamps={"action": [i / FPS for i in range(16)]})
    out: dict = {"episodes": loader.meta.num_episodes, "frames": loader.meta.total_frames,
                 "video_files": len(list((root / "videos").glob("*/*/*.mp4"))), "batches_per_epoch": len(loader),
                 "rss_mb": {}, "bounded": {}}
    t0 = time.perf_counter()
    for n, _ in enumerate(loader, 1):
        if n in CHECKPOINTS or n == batches:
            out["rss_mb"][n] = round(rss_mb(), 1)
            if hasattr(loader, "stats"):
                out["bounded"][n] = {k: {f: v for f, v in part.items() if f in ("held", "peak", "bound", "files")}
                                     for k, part in loader.stats()["bounded"].items()}
            print(f"batch {n}: RSS {out['rss_mb'][n]} MB, {n / (time.perf_counter() - t0):.0f} batches/s",
                  flush=True)
        if n >= batches:
            break
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    loader.close()
    rss = out["rss_mb"]
    first, last = rss[CHECKPOINTS[0]], rss[batches]
    out["growth_after_150_mb"] = round(last - first, 1)
    if CHECKPOINTS[1] < batches:
        out["growth_2400_to_last"] = round(last / rss[CHECKPOINTS[1]], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=200_000)
    ap.add_argument("--batches", type=int, default=9600)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    root = write_video_dataset(ROOT / f"eps-{args.episodes}", args.episodes)
    print(f"dataset ready in {time.perf_counter() - t0:.1f} s", flush=True)
    result = {"python": platform.python_version(), **measure(root, args.batches)}
    print(json.dumps(result), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
