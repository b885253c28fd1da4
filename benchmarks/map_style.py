"""lerobot's training loop kept as it is: torch's DataLoader around `loader.dataset` against lerobot 0.6.1's own
`LeRobotDataset` in the same DataLoader, alternated, each run a process of its own.

    .venv/bin/python benchmarks/map_style.py DATASET [DATASET ...] --lerobot-python VENV/bin/python
        [--rounds 3] [--batches 40] [--out benchmarks/results/cpu-2core-map-style/map_style.json]

Both sides: `DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2)` with the same seeded sampler (the same
sample indices in the same order: both datasets count the same frames), no windows, lerobot's default decoder
(torchcodec) and ours (`decode='auto'`, the CPU here). A run times `--batches` batches after the first one (the
workers' start and their first opens are not timed, a training loop pays them once): samples/s. lerobot runs in its
own interpreter (`--lerobot-python`: lerobot 0.6.1 needs Python 3.12, or the patched 3.11 venv a developer builds);
the loader in this one. Ratios are taken within a round (the two runs of a round ran back to back). Results are
keyed by each dataset's folder name.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

from _common import alternate, child, spread, within_rounds, write_result

ROOT = Path(__file__).resolve().parents[1]

# one run: DataLoader(dataset, 8, shuffle, 2 workers); `dataset` made by OPEN; argv: dataset, batches
RUN = r"""
import sys, time, torch
root, batches = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
OPEN
opened_s = time.perf_counter() - t0
dl = torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2,
                                 generator=torch.Generator().manual_seed(0))
it = iter(dl)
t1 = time.perf_counter()
first = next(it)
first_s = time.perf_counter() - t1
t2, n = time.perf_counter(), 0
for k, batch in enumerate(it):
    n += len(batch["index"])
    if k + 1 >= batches:
        break
seconds = time.perf_counter() - t2
RESULT = {"samples_per_s": n / seconds, "samples": n, "open_s": round(opened_s, 3), "first_batch_s": round(first_s, 3)}
"""
OURS = "from dali_stream import StreamLoader\nloader = StreamLoader(root, device='cpu')\ndataset = loader.dataset"
LEROBOT = ("import os\nos.environ['HF_HUB_OFFLINE'] = '1'\nfrom lerobot.datasets.lerobot_dataset import LeRobotDataset\n"
           "dataset = LeRobotDataset('local/map-style', root=root)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--lerobot-python", required=True, help="an interpreter where lerobot 0.6.1 imports")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-map-style/map_style.json")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def run(config: tuple[str, str]) -> dict:
        side, dataset = config
        code = RUN.replace("OPEN", OURS if side == "dali_stream" else LEROBOT)
        if side == "dali_stream":
            return child(code, dataset, str(args.batches), cwd=ROOT, env=env)
        return child(code, dataset, str(args.batches), cwd=ROOT, env=env, python=args.lerobot_python)

    report: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "rounds": args.rounds,
                    "batches": args.batches, "batch_size": 8, "num_workers": 2, "datasets": {}}
    for dataset in args.datasets:
        runs = alternate([("dali_stream", dataset), ("lerobot", dataset)], args.rounds, run)
        ours, theirs = runs[("dali_stream", dataset)], runs[("lerobot", dataset)]
        name = Path(dataset).name
        report["datasets"][name] = {
            "dali_stream_samples_per_s": spread(r["samples_per_s"] for r in ours),
            "lerobot_samples_per_s": spread(r["samples_per_s"] for r in theirs),
            "ratio": within_rounds(ours, theirs, "samples_per_s"),
            "runs": {"dali_stream": ours, "lerobot": theirs}}
        print(name, report["datasets"][name]["ratio"])
    print(write_result(args.out, report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
