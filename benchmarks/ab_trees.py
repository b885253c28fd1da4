"""`dali-stream bench` on two trees of this repository, alternated: an earlier commit against the working tree, for a
change that must not cost speed (a refactor: "after / before >= 0.97").

    python benchmarks/ab_trees.py --rev REV [--rounds 3] [--out DIR] -- [bench arguments ...]

The earlier tree is checked out with `git worktree` into a temporary folder and run from there by the same interpreter
(its `dali_stream` first on PYTHONPATH, and `-P` keeps the working folder off `sys.path`); the rounds alternate which
tree runs first. Reported: each tree's samples/s per round, their medians and ranges, and the ratio of the medians, as a
table and `ab.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import earlier_tree  # run as `python benchmarks/ab_trees.py`: this folder is on sys.path

ROOT = Path(__file__).resolve().parents[1]


def run_bench(tree: Path, out: Path, bench_args: list[str]) -> float:
    """One `dali-stream bench` run of `tree`'s code: its samples/s."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # -P: `-m` would put the working folder (this tree) first on sys.path, ahead of PYTHONPATH
    cmd = [sys.executable, "-P", "-m", "dali_stream", "bench", *bench_args, "--out-dir", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench failed in {tree}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    newest = max(out.glob("bench-*.json"), key=lambda p: p.stat().st_mtime)
    return float(json.loads(newest.read_text())["samples_per_s"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", required=True, help="the earlier commit")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/ab")
    ap.add_argument("bench_args", nargs="*", help="after --: what `dali-stream bench` is given")
    args = ap.parse_args()
    out = Path(args.out)
    with earlier_tree(args.rev, ROOT) as before:
        rates: dict[str, list[float]] = {"before": [], "after": []}
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for name in order:
                tree = before if name == "before" else ROOT
                rate = run_bench(tree, out / name, args.bench_args)
                rates[name].append(rate)
                print(f"round {r + 1} {name}: {rate:.1f} samples/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    report = {"rev": args.rev, "bench_args": args.bench_args, "rounds": args.rounds, "samples_per_s": rates,
              "median": med, "range": {k: [min(v), max(v)] for k, v in rates.items()},
              "after_over_before": med["after"] / med["before"]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "ab.json").write_text(json.dumps(report, indent=2) + "\n")
    print("| tree | samples/s per round | median | range |\n|---|---|---|---|")
    for k, v in rates.items():
        print(f"| {k} | {', '.join(f'{x:.0f}' for x in v)} | {med[k]:.0f} | {min(v):.0f}-{max(v):.0f} |")
    print(f"after / before (medians): {report['after_over_before']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
