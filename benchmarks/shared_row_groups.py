"""Data files written as one row group for many episodes (lerobot's dataset tools, its v2.1 converter): what reading
an episode's rows costs, with the decoded groups kept on a local drive (`table_cache_dir`) and without.

    .venv/bin/python benchmarks/shared_row_groups.py [--files 4] [--rows 300000] [--reads 60] [--rounds 3]
                                                     [--batches 150] [--out F]

Writes one dataset's tables (meta and data, no videos: only rows are read here) twice: `--files` data files of
`--rows` rows (episodes of 300 rows, a 14-value state and action as a bimanual arm records), once with one row group
per episode (lerobot's recorder) and once with one row group per file (pyarrow's default, which pandas'
`to_parquet` uses: lerobot-edit-dataset and the converter write them so). Then `fetch.tables.TableReader` reads the rows of `--reads`
episodes drawn at random over all files (one seed), in four configurations, alternated `--rounds` times:

- `per-episode`: the recorder's layout (the reference);
- `one-group-memory`: one group a file, `table_cache_dir='off'` (the last 2 decoded groups kept in memory);
- `one-group-cold`: one group a file, an empty `table_cache_dir` (each group decoded once, written, mapped);
- `one-group-warm`: the same folder once filled (a later run, or another rank of the node).

Reported: ms per episode read (median and range over rounds) and the ratio to `per-episode`. A loader reads an
episode's rows once when it enters the pool, so ms per read / episode length is what each sample pays. Then the whole
loader over the tables alone (no cameras), `--batches` batches of 256 a configuration, alternated: samples a second
for `per-episode`, `one-group-memory` and `one-group-warm`, and each one's ratio to `per-episode` within a round.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from _common import alternate, spread, within_rounds, write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EPISODE = 300
DIM = 14


def write_tables(root: Path, files: int, rows: int, one_group: bool) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    per_file = rows // EPISODE
    episodes = []
    (root / "data/chunk-000").mkdir(parents=True)
    (root / "meta/episodes/chunk-000").mkdir(parents=True)
    for f in range(files):
        first = f * per_file
        n = per_file * EPISODE
        index = np.arange(first * EPISODE, first * EPISODE + n)
        frame = index % EPISODE
        vec = lambda: pa.FixedSizeListArray.from_arrays(  # noqa: E731
            pa.array(rng.standard_normal(n * DIM, dtype=np.float32)), DIM)
        table = pa.table({"observation.state": vec(), "action": vec(), "timestamp": (frame / 30).astype(np.float32),
                          "frame_index": frame, "episode_index": index // EPISODE, "index": index,
                          "task_index": (index // EPISODE) % 5})
        path = root / f"data/chunk-000/file-{f:03d}.parquet"
        if one_group:
            pq.write_table(table, path)  # pyarrow's default, as pandas' to_parquet: groups of up to 1Mi rows
        else:
            pq.write_table(table, path, row_group_size=EPISODE)
        for e in range(per_file):
            episodes.append({"episode_index": first + e, "length": EPISODE, "tasks": [f"task {(first + e) % 5}"],
                             "dataset_from_index": (first + e) * EPISODE, "dataset_to_index": (first + e + 1) * EPISODE,
                             "data/chunk_index": 0, "data/file_index": f})
    pq.write_table(pa.Table.from_pylist(episodes), root / "meta/episodes/chunk-000/file-000.parquet")
    pq.write_table(pa.table({"task_index": list(range(5)), "task": [f"task {i}" for i in range(5)]}),
                   root / "meta/tasks.parquet")
    features = {"observation.state": {"dtype": "float32", "shape": [DIM], "names": None},
                "action": {"dtype": "float32", "shape": [DIM], "names": None},
                **{k: {"dtype": "int64", "shape": [1], "names": None}
                   for k in ("frame_index", "episode_index", "index", "task_index")},
                "timestamp": {"dtype": "float32", "shape": [1], "names": None}}
    info = {"codebase_version": "v3.0", "fps": 30, "total_episodes": len(episodes), "total_frames": len(episodes) *
            EPISODE, "total_tasks": 5, "chunks_size": 1000, "data_files_size_in_mb": 100,
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet", "features": features}
    (root / "meta/info.json").write_text(json.dumps(info))


LOADER_BATCH = 256


def loader_run(base: Path, config: str, batches: int) -> dict:
    """`batches` batches of a `StreamLoader` over the tables alone (no cameras: what a batch's rows cost the loader,
    its pool opening an episode at random over all files as training does), samples a second."""
    import time
    import warnings

    from dali_stream import StreamLoader

    folder = {"one-group-memory": "off", "one-group-warm": str(base / "warm")}.get(config)
    root = base / ("per-episode" if config == "per-episode" else "one-group")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with StreamLoader(str(root), batch_size=LOADER_BATCH, device="cpu", seed=3, table_cache_dir=folder) as loader:
            t0, n = time.perf_counter(), 0
            for i, batch in enumerate(loader):
                n += len(batch["index"])
                if i + 1 == batches:
                    break
            return {"samples_per_s": n / (time.perf_counter() - t0)}


def main(argv=None) -> int:
    import time
    import warnings

    import numpy as np

    from dali_stream.fetch.tables import TableReader
    from dali_stream.meta.dataset import DatasetMeta

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--rows", type=int, default=300_000, help="rows a data file")
    p.add_argument("--reads", type=int, default=60, help="episodes read a round, drawn over all files")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", type=int, default=150, help="batches of the whole loader a configuration (0: none)")
    p.add_argument("--out", default="benchmarks/results/cpu-2core-shared-row-groups/result.json")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for name, one in (("per-episode", False), ("one-group", True)):
            write_tables(base / name, args.files, args.rows, one)
        metas = {name: DatasetMeta.open(str(base / name)) for name in ("per-episode", "one-group")}
        keys = [k for k in metas["per-episode"].table_keys]
        total = metas["per-episode"].num_episodes
        picks = np.random.default_rng(1).choice(total, size=args.reads, replace=False)
        want = {int(pos): TableReader(metas["per-episode"], keys).episode(int(pos)) for pos in picks[:5]}
        warm = base / "warm"

        def run(config: str) -> dict:
            folder = {"one-group-cold": str(base / "cold"), "one-group-warm": str(warm)}.get(config)
            if config == "one-group-cold":
                shutil.rmtree(folder, ignore_errors=True)
            reader = TableReader(metas["per-episode" if config == "per-episode" else "one-group"], keys,
                                 table_cache_dir=folder)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                got = {int(pos): reader.episode(int(pos)) for pos in picks}
                seconds = time.perf_counter() - t0
            for pos, rows in want.items():  # the same rows whatever the layout
                assert all(np.array_equal(rows[k], got[pos][k]) for k in rows), (config, pos)
            return {"ms_per_read": seconds / len(picks) * 1e3, "groups_decoded": reader.groups.decoded,
                    "groups_mapped_from_disk": reader.groups.disk_hits}

        TableReader(metas["one-group"], keys, table_cache_dir=str(warm)).episode(0)  # fill the warm folder
        for f in range(1, args.files):
            TableReader(metas["one-group"], keys, table_cache_dir=str(warm)).episode(f * (args.rows // EPISODE))
        configs = ("per-episode", "one-group-memory", "one-group-cold", "one-group-warm")
        got = alternate(configs, args.rounds, run)
        loader = alternate(("per-episode", "one-group-memory", "one-group-warm"), args.rounds,
                           lambda config: loader_run(base, config, args.batches)) if args.batches else {}
    ref = spread([r["ms_per_read"] for r in got["per-episode"]])["median"]
    result = {
        "command": "python benchmarks/shared_row_groups.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.node()} {platform.machine()}",
        "files": args.files, "rows_per_file": args.rows, "episode_rows": EPISODE, "reads": args.reads,
        "rounds": args.rounds,
        "configs": {c: {"ms_per_read": spread([r["ms_per_read"] for r in runs]),
                        "ratio_to_per_episode": spread([r["ms_per_read"] / ref for r in runs]),
                        "groups_decoded": [r["groups_decoded"] for r in runs],
                        "groups_mapped_from_disk": [r["groups_mapped_from_disk"] for r in runs]}
                    for c, runs in got.items()},
        "loader": {"batches": args.batches, "batch_size": LOADER_BATCH,
                   "configs": {c: {"samples_per_s": spread([r["samples_per_s"] for r in runs]),
                                   "ratio_to_per_episode": within_rounds(runs, loader["per-episode"], "samples_per_s")}
                               for c, runs in loader.items()}},
    }
    print(write_result(args.out, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
