"""What an MP4 index costs the process per frame: every video file of a dataset indexed as the loader indexes it
(`fetch.indexes.IndexCache` over local range reads), the resident set before and after, against what the cache
weighs (`_index_bytes`, the bytes its bound counts).

    .venv/bin/python benchmarks/index_memory.py DATASET [--rounds 20] [--out results.json]

Each round indexes every file again into a fresh cache that keeps them all (the first round warms the
allocator and the imports); the process's RSS growth over the rounds, divided by the frames indexed per round
and the rounds, is what one file's index holds while the cache keeps it. Run it on two commits alternately to
compare them (PYTHONPATH pointing at each tree).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import fsspec
    import psutil

    from dali_stream.fetch.indexes import IndexCache, _index_bytes
    from dali_stream.source.storage import LocalRanges

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    files = sorted(str(p) for p in Path(args.dataset).glob("videos/**/*.mp4"))
    ranges = LocalRanges(fsspec.filesystem("file"))
    me = psutil.Process()
    kept, growth = [], []
    weighed = frames = 0
    for round_ in range(args.rounds + 1):
        gc.collect()
        before = me.memory_info().rss
        cache = IndexCache(ranges, capacity_bytes=1 << 40)
        entries = [cache.get(f) for f in files]
        gc.collect()
        if round_ == 0:  # warm-up: imports, allocator pools
            frames = sum(len(e.index.sizes) for e in entries if e is not None)
            weighed = sum(_index_bytes(e) for e in entries)
        else:
            growth.append(me.memory_info().rss - before)
        kept.append((cache, entries))  # every round's indexes stay alive: what a long run's cache holds
    per_frame = [g / frames for g in growth]
    result = {"dataset": args.dataset, "files": len(files), "frames_per_round": frames, "rounds": args.rounds,
              "rss_bytes_per_frame_median": statistics.median(per_frame),
              "rss_bytes_per_frame_range": [min(per_frame), max(per_frame)],
              "weighed_bytes_per_frame": weighed / frames}
    print(json.dumps(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
