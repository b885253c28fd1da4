"""How the loader scales with the number of episodes: constructor time, resident memory along an epoch,
and `load_state_dict` + next batch at positions deep into the epoch.

    python3 benchmarks/scale.py [--episodes 1000,10000,50000,200000] [--batches 1200] [--out results.json]

Each dataset is a generated LeRobot v3 dataset without cameras (what grows with the episode count is metadata:
episode tables, data-file footers, plans), laid out as lerobot's recorder writes it: 1,000 episodes per data
file, one row group per episode, 30-90 frames each, state and action of 6 floats. Written once under
`.demo/scale/` (kept between runs). Memory is the process's resident set (psutil) after batch 50, 150 and the
last of `--batches` (batch 16, 2 workers); resume is timed at a quarter, half and nine tenths of the epoch on
a fresh loader, as a restarted job does it.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(".demo/scale")
PER_FILE = 1000
FPS = 30


def write_dataset(root: Path, episodes: int, seed: int = 0, lengths: tuple[int, int] = (30, 91)) -> Path:
    """A camera-less LeRobot v3.0 dataset of `episodes` episodes (module doc; `lengths`: the episodes' frames,
    from the first up to the second, excluded); kept when already complete."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if (root / "meta" / "info.json").exists():
        return root
    partial = root.with_name(root.name + ".partial")
    rng = np.random.default_rng(seed)
    lengths = rng.integers(*lengths, episodes)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    for f in range(0, episodes, PER_FILE):
        path = partial / "data" / f"chunk-{f // PER_FILE // 1000:03d}" / f"file-{f // PER_FILE % 1000:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = None
        for e in range(f, min(f + PER_FILE, episodes)):
            n = int(lengths[e])
            values = rng.random((n, 6), dtype=np.float32)
            table = pa.table({
                "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), 6),
                "action": pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()[::-1].copy()), 6),
                "timestamp": pa.array((np.arange(n) / FPS).astype(np.float32)),
                "frame_index": pa.array(np.arange(n, dtype=np.int64)),
                "episode_index": pa.array(np.full(n, e, dtype=np.int64)),
                "index": pa.array(np.arange(n, dtype=np.int64) + starts[e]),
                "task_index": pa.array(np.zeros(n, dtype=np.int64)),
            })
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table)  # one row group per episode
        writer.close()
    files = np.arange(episodes) // PER_FILE
    (partial / "meta" / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "episode_index": np.arange(episodes), "tasks": [["move"]] * episodes, "length": lengths,
        "dataset_from_index": starts, "dataset_to_index": starts + lengths,
        "data/chunk_index": files // 1000, "data/file_index": files % 1000,
        "meta/episodes/chunk_index": np.zeros(episodes, np.int64), "meta/episodes/file_index": np.zeros(episodes, np.int64),
    }), partial / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    pq.write_table(pa.table({"task_index": [0], "__index_level_0__": ["move"]}), partial / "meta" / "tasks.parquet")
    features = {"observation.state": {"dtype": "float32", "shape": [6], "names": None},
                "action": {"dtype": "float32", "shape": [6], "names": None}}
    for key, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"),
                       ("index", "int64"), ("task_index", "int64")):
        features[key] = {"dtype": dtype, "shape": [1], "names": None}
    info = {"codebase_version": "v3.0", "robot_type": "scale", "total_episodes": episodes,
            "total_frames": int(lengths.sum()), "total_tasks": 1, "chunks_size": 1000, "fps": FPS,
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet", "features": features}
    (partial / "meta" / "info.json").write_text(json.dumps(info))
    partial.rename(root)
    return root


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def measure(root: Path, batches: int) -> dict:
    from dali_stream import StreamLoader

    settings = dict(batch_size=16, num_workers=2, device="cpu", delta_timestamps={"action": [i / FPS for i in range(8)]})
    gc.collect()
    t0 = time.perf_counter()
    loader = StreamLoader(str(root), **settings)
    out: dict = {"episodes": loader.meta.num_episodes, "frames": loader.meta.total_frames,
                 "batches_per_epoch": len(loader), "constructor_s": time.perf_counter() - t0, "rss_mb": {}}
    t0 = time.perf_counter()
    for n, _ in enumerate(loader, 1):
        if n == 1:
            out["first_batch_s"] = time.perf_counter() - t0
        if n in (50, 150, batches):
            out["rss_mb"][n] = round(rss_mb(), 1)
        if n >= batches:
            break
    budget = loader.memory_budget()
    out["table_footers_peak_mb"] = budget["table_footers_peak"] / 2**20
    loader.close()
    out["resume_s"] = {}
    for fraction in (0.25, 0.5, 0.9):
        position = int(len(loader) * fraction)
        state = dict(loader.state_dict(), batches_consumed=position, epoch=0)
        fresh = StreamLoader(str(root), **settings)
        t0 = time.perf_counter()
        fresh.load_state_dict(state)
        next(iter(fresh))
        out["resume_s"][f"batch {position}"] = round(time.perf_counter() - t0, 3)
        fresh.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", default="1000,10000,50000,200000")
    ap.add_argument("--batches", type=int, default=1200)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    results = {"python": platform.python_version(), "runs": []}
    for n in (int(x) for x in args.episodes.split(",")):
        t0 = time.perf_counter()
        root = write_dataset(ROOT / f"eps-{n}", n)
        print(f"{n} episodes: dataset ready in {time.perf_counter() - t0:.1f} s", flush=True)
        run = measure(root, args.batches)
        print(json.dumps(run), flush=True)
        results["runs"].append(run)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
