"""Freed memory handed back only where it grew (`loader/memory.py`): this tree's loader against an earlier commit's,
over several epochs, where the pages a trim hands back are the ones the next batches take again.

    .venv/bin/python benchmarks/freed_memory.py --rev REV [--shapes sample-96x128,libero-256x256] [--rounds 4]
        [--epochs 3] [--global-shuffle DATASET] [--out results.json]

The shapes are `host_path.py`'s datasets (written there where missing): the README sample's (three 96x128 cameras)
and LIBERO's (two 256x256 AV1 cameras at 10 fps), read by the loader with its defaults on the CPU (batch 16,
float32, a pool of 16: each open episode's cameras decoded whole and held until it retires). `--global-shuffle
DATASET` adds that dataset under `episode_pool_size="all"`, batch 64 (the loader that grew to 1.83 GB without
trims). Each configuration a process of its own (its peak RSS its own), the trees alternated over `--rounds`
rounds, ratios within a round; per epoch: samples/s, the process's system CPU seconds and minor page faults, and
the trims made (`release_freed.trims`, where the tree counts them).
"""

from __future__ import annotations

import argparse
import sys

from _common import alternate, child, earlier_tree, spread, write_result
from host_path import ROOT, SHAPES, dataset

LOADER = r"""
import resource, sys, time
import torch
from dali_stream import StreamLoader
from dali_stream.loader import memory
ds, epochs, everything = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
kwargs = {"episode_pool_size": "all", "batch_size": 64} if everything else {}
loader = StreamLoader(ds, device="cpu", seed=1, **kwargs)
rates, sys_s, faults = [], [], []
for _ in range(epochs):
    r0, t0, n = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), 0
    for batch in loader:
        n += len(batch["index"])
    t, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    rates.append(n / t)
    sys_s.append(r1.ru_stime - r0.ru_stime)
    faults.append(r1.ru_minflt - r0.ru_minflt)
RESULT = {"samples_per_s": rates, "sys_s": sys_s, "minor_faults": faults,
          "trims": getattr(memory.release_freed, "trims", None)}
loader.close()
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", required=True, help="the earlier commit whose loader alternates with this tree's")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)}")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--global-shuffle", metavar="DATASET", help="a dataset also read under a global shuffle")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/cpu-2core-host-path/freed-memory.json"))
    args = ap.parse_args(argv)
    paths = {name: (dataset(name), "0") for name in args.shapes.split(",")}
    if args.global_shuffle:
        paths["global-shuffle"] = (args.global_shuffle, "1")
    with earlier_tree(args.rev, ROOT) as before:
        configs = [(name, tree) for name in paths for tree in ("after", "before")]
        got = alternate(configs, args.rounds, lambda c: child(LOADER, paths[c[0]][0], str(args.epochs),
                                                              paths[c[0]][1],
                                                              cwd=ROOT if c[1] == "after" else before))
    summary: dict = {}
    for name in paths:
        after, before = got[(name, "after")], got[(name, "before")]
        summary[name] = {
            **{f"{tree} epoch {e + 1} samples/s": spread(r["samples_per_s"][e] for r in got[(name, tree)])
               for tree in ("after", "before") for e in range(args.epochs)},
            **{f"after / before epoch {e + 1}": spread(a["samples_per_s"][e] / b["samples_per_s"][e]
                                                       for a, b in zip(after, before)) for e in range(args.epochs)},
            **{f"{tree} epoch {e + 1} {m}": spread(r[m][e] for r in got[(name, tree)])
               for tree in ("after", "before") for e in range(args.epochs) for m in ("sys_s", "minor_faults")},
            **{f"{tree} peak RSS MB": spread(r["peak_rss_mb"] for r in got[(name, tree)])
               for tree in ("after", "before")},
            "after trims": spread(r["trims"] for r in after),
        }
    print(write_result(args.out, {"command": " ".join(["benchmarks/freed_memory.py", *(argv or sys.argv[1:])]),
                                  "rev": args.rev, "rounds": args.rounds, "epochs": args.epochs,
                                  "datasets": {k: v[0] for k, v in paths.items()}, "summary": summary,
                                  "runs": {" ".join(c): got[c] for c in configs}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
