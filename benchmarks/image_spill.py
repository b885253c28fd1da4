"""A global shuffle over cameras stored as images in the frame tables, past `cache_bytes`: the open episodes' images
kept in memory against kept on the drive (`dali_stream/fetch/image_spill.py`).

    .venv/bin/python benchmarks/image_spill.py [--episodes 80] [--frames 15] [--size 256] [--rounds 3]
                                               [--epochs 2] [--cache-fraction 0.25] [--out F]
    .venv/bin/python benchmarks/image_spill.py --one-group --rev REV [--rounds 3] [--out F]

The dataset is `table_images.py`'s (two `--size` square cameras stored as PNG in the tables, one row group per
episode). Each run is a process of its own streaming `--epochs` epochs with `episode_pool_size="all"` (every episode
of the rank open from its first frame drawn to its last), batches of 32 as float32, `cache_bytes` `--cache-fraction`
of the data files' bytes:

- `memory`: `table_cache_dir="off"`: the open episodes' images stay in memory, past `cache_bytes`;
- `drive`: `table_cache_dir` a temporary folder: past `cache_bytes` they are written there and read back per sample.

Alternated `--rounds` times. Reported per configuration: samples a second per epoch (median and range), the process's
peak RSS, the fetched episodes' peak bytes and the image bytes written to the drive; `drive` against `memory` within
each round.

`--one-group`: each data file rewritten as one row group (as lerobot's dataset tools and its v2.1 converter write
them), so `table_cache_dir` decodes each once and maps it (`fetch.decoded_groups`); with `--rev REV` the `drive`
configuration of this tree (images read from the mapping, `fetch.mapped_images`) alternates with commit REV's (each
tree its own table cache folder), their ratios within each round.
"""

from __future__ import annotations

import platform
import sys
import tempfile
from pathlib import Path

from _common import alternate, child, earlier_tree, spread, within_rounds, write_result
from table_images import parser, written

CHILD = r"""
import sys, time
from dali_stream import StreamLoader
root, table_cache_dir, epochs, cache_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
speeds = []
with StreamLoader(root, batch_size=32, device="cpu", seed=5, cache_bytes=cache_bytes, episode_pool_size="all",
                  table_cache_dir=table_cache_dir) as loader:
    for _ in range(epochs):
        t0, n = time.perf_counter(), 0
        for batch in loader:
            n += len(batch["index"])
        speeds.append(n / (time.perf_counter() - t0))
    stats = loader.stats()
RESULT = {"samples_per_s": speeds, "fetched_peak": stats["bounded"]["fetched_episodes"]["peak"],
          "image_bytes_spilled": stats["fetch"]["image_bytes_spilled"]}
"""


def main(argv=None) -> int:
    ap = parser(__doc__, 2, 0.25, "benchmarks/results/cpu-2core-table-images/image-spill.json")
    ap.add_argument("--one-group", action="store_true", help="each data file rewritten as one row group")
    ap.add_argument("--rev", help="with --one-group: the drive configuration of commit REV against this tree's")
    args = ap.parse_args(argv)
    here = Path(__file__).parents[1]
    with tempfile.TemporaryDirectory() as tmp, earlier_tree(args.rev, here) as before:
        root, data_bytes, cache_bytes = written(tmp, args)
        if args.one_group:
            import pyarrow.parquet as pq

            for path in root.glob("data/*/*.parquet"):
                pq.write_table(pq.read_table(path), path, row_group_size=1 << 20)
        folders = {"memory": ("off", here), "drive": (str(Path(tmp) / "tables"), here)}
        if before is not None:
            folders = {"drive": folders["drive"], "before": (str(Path(tmp) / "tables-before"), before)}
        got = alternate(tuple(folders), args.rounds, lambda config: child(
            CHILD, str(root), folders[config][0], str(args.epochs), str(cache_bytes), cwd=folders[config][1]))

    def per_epoch(runs: list[dict], e: int) -> list[dict]:
        return [{"samples_per_s": r["samples_per_s"][e]} for r in runs]

    result = {
        "command": "python benchmarks/image_spill.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.node()} {platform.machine()}",
        "episodes": args.episodes, "frames_per_episode": args.frames, "size": args.size, "batch_size": 32,
        "one_group": args.one_group, "rev": args.rev,
        "rounds": args.rounds, "data_files_bytes": data_bytes, "cache_bytes": cache_bytes,
        "configs": {c: {**{f"epoch_{e + 1}": spread([r["samples_per_s"][e] for r in runs])
                           for e in range(args.epochs)},
                        "peak_rss_mb": spread([r["peak_rss_mb"] for r in runs]),
                        "fetched_episodes_peak_bytes": [r["fetched_peak"] for r in runs],
                        "image_bytes_spilled": [r["image_bytes_spilled"] for r in runs]}
                    for c, runs in got.items()},
        f"drive_to_{'before' if before is not None else 'memory'}": {
            f"epoch_{e + 1}": within_rounds(per_epoch(got["drive"], e), per_epoch(got[list(folders)[1]], e),
                                            "samples_per_s") for e in range(args.epochs)},
    }
    print(write_result(args.out, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
