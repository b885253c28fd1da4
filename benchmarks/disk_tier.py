"""The node-local disk tier (`disk_cache_dir`): a remote dataset 4x the memory cache, epoch 2 read from the node's
drive against the same data read from local disk, and against the remote without the tier, in one run.

    .venv/bin/python benchmarks/disk_tier.py [DATASET] [--delay-ms 30] [--mbit-s 200] [--rounds 3]
        [--out benchmarks/results/cpu-2core-disk-tier/disk_tier.json]

DATASET defaults to .demo/disk-tier: 120 episodes of 20-40 frames, two 96x128 cameras (H.264 and AV1), written by
the sample writer on first use. The store is `benchmarks/far_store.py` on loopback, a process of its
own: every GET answered after `--delay-ms`, all bodies together sent at `--mbit-s`. Each run is a child process:
`cache_bytes` a quarter of the dataset's bytes, batch 16, pool 16, 2 workers, uint8 frames on the CPU, two whole
epochs, each timed (samples/s), with the bytes read from the remote and from the disk tier in each. Three runs:
`local` (the folder itself), `tier` (over HTTP with a disk tier that starts empty in each round) and `remote` (over
HTTP without it), alternated `--rounds` times (`_common.alternate`); what to read is epoch 2's rate of each HTTP run
over the local run's of the same round (median and range) and the tier's epoch-2 remote bytes over its epoch-1's.
The store shares the 2 cores with the loader, as in `remote_prefetch.py`.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import alternate, child, spread, within_rounds, write_result

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = dict(episodes=120, min_length=20, max_length=40, cameras="front:h264,wrist:av1", height=96, width=128)

RUN = """
import sys, time
from dali_stream import StreamLoader
source, cache_bytes, disk = sys.argv[1], int(sys.argv[2]), sys.argv[3] or None
loader = StreamLoader(source, batch_size=16, episode_pool_size=16, seed=0, device="cpu", num_workers=2,
                      image_dtype="uint8", cache_bytes=cache_bytes, disk_cache_dir=disk)
epochs = []
for epoch in (1, 2):
    before = dict(loader.remote_stats or {})
    t0, samples = time.perf_counter(), 0
    for batch in loader:
        samples += len(batch["task"])
    seconds = time.perf_counter() - t0
    after = loader.remote_stats or {}
    epochs.append({"samples": samples, "seconds": round(seconds, 3), "samples_per_s": round(samples / seconds, 1),
                   **{k: after[k] - before.get(k, 0) for k in ("bytes", "requests", "disk_bytes_read") if k in after}})
loader.close()
RESULT = {"epochs": epochs, "epoch2_samples_per_s": epochs[1]["samples_per_s"]}
"""


def _bytes(folder: str) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?", default=".demo/disk-tier")
    ap.add_argument("--delay-ms", type=float, default=30.0)
    ap.add_argument("--mbit-s", type=float, default=200.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-disk-tier/disk_tier.json")
    args = ap.parse_args()
    if not Path(args.dataset).exists():
        from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

        write_sample(args.dataset, SampleSpec(**{**SAMPLE, "cameras": parse_cameras(SAMPLE["cameras"])}))
    cache_bytes = _bytes(args.dataset) // 4
    server = subprocess.Popen([sys.executable, str(ROOT / "benchmarks/far_store.py"), args.dataset,
                               f"--delay-ms={args.delay_ms}", f"--mbit-s={args.mbit_s}"], stdout=subprocess.PIPE,
                              text=True)
    scratch = tempfile.mkdtemp(prefix="disk-tier-bench-")
    try:
        url = server.stdout.readline().strip() if server.stdout else ""

        def run(name: str) -> dict:
            disk = ""
            if name == "tier":
                disk = os.path.join(scratch, f"tier-{time.monotonic_ns()}")  # empty at the start of each round
            source = str(Path(args.dataset).resolve()) if name == "local" else url
            got = child(RUN, source, str(cache_bytes), disk, cwd=ROOT)
            if disk:
                shutil.rmtree(disk, ignore_errors=True)
            return got

        got = alternate(["local", "tier", "remote"], args.rounds, run)
    finally:
        server.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    tier = got["tier"]
    report = {"dataset": args.dataset, "dataset_bytes": _bytes(args.dataset), "cache_bytes": cache_bytes,
              "delay_ms": args.delay_ms, "mbit_s": args.mbit_s, "rounds": args.rounds, "host": platform.node(),
              "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
              "epoch2_samples_per_s": {k: spread(r["epoch2_samples_per_s"] for r in rs) for k, rs in got.items()},
              "epoch2_vs_local": {k: within_rounds(rs, got["local"], "epoch2_samples_per_s") for k, rs in got.items()
                                  if k != "local"},
              "tier_epoch2_remote_bytes_over_epoch1": spread(r["epochs"][1]["bytes"] / r["epochs"][0]["bytes"]
                                                             for r in tier),
              "runs": got}
    print(write_result(args.out, report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
