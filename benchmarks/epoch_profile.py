"""One full epoch the way a training job sees it: constructor time after imports, first batch after `iter()`,
samples/s over the whole epoch, and peak resident memory (psutil, every 50 ms).

The configuration lerobot 0.6.1 was measured with: batch 16, 2 workers, a 16-step action window,
episode pool 16, CPU batches. Runs against whichever dali_stream is importable, so the same script measures
an older checkout too (`PYTHONPATH=/path/to/old/checkout`), and appends one JSON line to `--out`.

    .venv/bin/python benchmarks/epoch_profile.py .demo/bench-av1 --label after --out results.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset")
    p.add_argument("--label", default="")
    p.add_argument("--out", default=None, help="append the result as one JSON line here")
    p.add_argument("--image-dtype", default="float32")
    p.add_argument("--memory-format", default="contiguous", choices=("contiguous", "channels_last"))
    args = p.parse_args()
    t = time.perf_counter()
    import psutil
    import torch  # noqa: F401

    import dali_stream
    from dali_stream import StreamLoader

    imports_s = time.perf_counter() - t
    proc, peak, stop = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.05)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    t = time.perf_counter()
    loader = StreamLoader(args.dataset, batch_size=16, num_workers=2, episode_pool_size=16, device="cpu",
                          image_dtype=args.image_dtype, memory_format=args.memory_format,
                          delta_timestamps={"action": [i / 30 for i in range(16)]})
    ctor_s = time.perf_counter() - t
    t, first, samples = time.perf_counter(), None, 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t
        samples += len(batch["task"])
    wall = time.perf_counter() - t
    stop.set()
    watcher.join()
    commit = subprocess.run(["git", "-C", os.path.dirname(os.path.dirname(dali_stream.__file__)), "rev-parse",
                             "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"label": args.label, "commit": commit, "dataset": args.dataset, "image_dtype": args.image_dtype,
              "memory_format": args.memory_format, "host_batches": loader.host_batches,
              "imports_s": round(imports_s, 2), "constructor_s": round(ctor_s, 3),
              "first_batch_s": round(first, 3), "samples": samples, "samples_per_s": round(samples / wall, 1),
              "peak_rss_gb": round(peak[0] / 2**30, 2), "routes": dict(loader.routes),
              "sample": loader.meta.info.get("dali_stream_sample"),  # the sample writer's settings, if it wrote it
              "date": time.strftime("%Y-%m-%d %H:%M")}
    print(json.dumps(result))
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
