"""The first batch after `iter()` and the epoch's rate, this tree against an earlier commit, alternated, each run a
process of its own.

    .venv/bin/python benchmarks/first_batch.py DATASET --before REV [--rounds 3]
        [--out benchmarks/results/cpu-2core-first-batch/first_batch.json]

A run: `StreamLoader(DATASET, device="cpu")` with its defaults (a pool of 16 episodes, batch 16), then two epochs:
for each, the seconds from `iter()` to the first batch and the epoch's samples/s (the first batch included). The
earlier commit runs from a `git worktree` of it (`_common.earlier_tree`). Ratios are taken within a round.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

from _common import alternate, child, earlier_tree, spread, within_rounds, write_result

ROOT = Path(__file__).resolve().parents[1]

RUN = r"""
import sys, time
t0 = time.perf_counter()
from dali_stream import StreamLoader
loader = StreamLoader(sys.argv[1], device="cpu")
RESULT = {"construct_s": round(time.perf_counter() - t0, 3)}
for epoch in range(2):
    t, n, first = time.perf_counter(), 0, None
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t
        n += len(batch["index"])
    RESULT[f"epoch{epoch}_first_batch_s"] = round(first, 3)
    RESULT[f"epoch{epoch}_samples_per_s"] = round(n / (time.perf_counter() - t), 1)
loader.close()
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--before", required=True, help="the earlier commit to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-first-batch/first_batch.json")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    dataset = str(Path(args.dataset).resolve())
    with earlier_tree(args.before, ROOT) as before:
        trees = {"this tree": ROOT, f"before ({args.before})": before}
        runs = alternate(list(trees), args.rounds, lambda name: child(RUN, dataset, cwd=trees[name], env=env))
    now, then = runs["this tree"], runs[f"before ({args.before})"]
    report: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "dataset": Path(dataset).name,
                    "rounds": args.rounds, "before": args.before, "runs": runs}
    for key in ("epoch0_first_batch_s", "epoch0_samples_per_s", "epoch1_first_batch_s", "epoch1_samples_per_s"):
        report[key] = {"this tree": spread(r[key] for r in now), "before": spread(r[key] for r in then),
                       "ratio": within_rounds(now, then, key)}
    print(write_result(args.out, report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
