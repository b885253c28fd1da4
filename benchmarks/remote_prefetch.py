"""Does decode wait on the network? The same epoch from local disk and over HTTP behind added latency,
with prefetch on admit (background fetch threads) and without (fetch on demand), in one run.

    .venv/bin/python benchmarks/remote_prefetch.py [DATASET] [--delay-ms 30] [--batches 120] [--rounds 3] [--out FILE]

The store is `benchmarks/far_store.py` on loopback, a process of its own: every GET waits `--delay-ms` before
it is answered, like a store far away (a timer, not a thread: the delay costs no CPU). Each run streams the
first `--batches` batches (batch 16, pool 16, mode single, 2 workers) after one warm-up batch and reports
samples/s, the time builders waited for fetches (`wait_s`; in total and after the first 20 batches, once the
first pool is in), and how many episodes were fetched on demand.
The three runs alternate, `--rounds` times (`_common.alternate`); what to read is each HTTP run's rate over the
local run's of the same round, median and range over the rounds (absolute rates move ±30 % on a shared 2-core VM).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from _common import alternate, spread, within_rounds, write_result

ROOT = Path(__file__).resolve().parents[1]
STEADY_AFTER = 20  # batches after which the run counts as steady state (the first pool is fetched)


def _run(source: str, batches: int, fetch_workers: int) -> dict:
    from dali_stream import StreamLoader

    loader = StreamLoader(source, batch_size=16, episode_pool_size=16, seed=0, device="cpu", num_workers=2,
                          fetch_workers=fetch_workers, image_dtype="uint8")
    it = iter(loader)
    next(it)  # warm-up: decoders, DALI graph, the first pool
    t0 = time.perf_counter()
    wait0 = loader.stats()["fetch"]["wait_s"]
    waits = []  # builders' cumulative wait after each batch
    n = 0
    for _ in range(batches):
        try:
            next(it)
        except StopIteration:
            break
        n += 1
        waits.append(loader.stats()["fetch"]["wait_s"] - wait0)
    wall = time.perf_counter() - t0
    stats = loader.stats()["fetch"]  # the store's counters (`StreamLoader.stats`)
    steady = waits[-1] - waits[STEADY_AFTER - 1] if n > STEADY_AFTER else None
    out = {"batches": n, "wall_s": round(wall, 3), "samples_per_s": round(n * 16 / wall, 1),
           "builders_waited_s": round(stats["wait_s"] - wait0, 3),
           f"builders_waited_after_batch_{STEADY_AFTER}_s": None if steady is None else round(steady, 3),
           "episodes_fetched": stats["episodes"],
           "fetched_on_demand": stats["demand_fetches"], "prefetched": stats["prefetches"]}
    if loader.remote_stats:
        out["remote"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in loader.remote_stats.items()}
    it.close()
    loader.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?", default=".demo/sample")
    ap.add_argument("--delay-ms", type=float, default=30.0)
    ap.add_argument("--batches", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the three runs, alternated (default %(default)s)")
    ap.add_argument("--out", default="benchmarks/results/cpu-2core/remote_prefetch.json")
    args = ap.parse_args()
    if not Path(args.dataset).exists():
        from dali_stream.tools.sample_data import write_sample

        write_sample(args.dataset)
    server = subprocess.Popen([sys.executable, str(ROOT / "benchmarks/far_store.py"), args.dataset,
                               f"--delay-ms={args.delay_ms}"], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip() if server.stdout else ""
        runs = {"local": (args.dataset, 4), "http_prefetch": (url, 4), "http_on_demand": (url, 0)}
        got = alternate(list(runs), args.rounds, lambda name: _run(runs[name][0], args.batches, runs[name][1]))
    finally:
        server.kill()
    report = {"dataset": args.dataset, "delay_ms": args.delay_ms, "rounds": args.rounds, "host": platform.node(),
              "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
              "samples_per_s": {k: spread(r["samples_per_s"] for r in rs) for k, rs in got.items()},
              "ratio_vs_local": {k: within_rounds(rs, got["local"], "samples_per_s") for k, rs in got.items()
                                 if k != "local"},
              "runs": got}
    print(write_result(args.out, report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
