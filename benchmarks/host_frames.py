"""Host frames against DALI's layout, in one run: the same loader, batches and plans, CPU-decoded cameras laid
out by the workers (`graph/host.py`, the default on a CPU node) or by DALI's CPU crop_mirror_normalize (forced
by a centre crop to the full frame, which changes no pixel).

    .venv/bin/python benchmarks/host_frames.py .demo/bench-av1 [--batches 300 --repeats 2 --out FILE]

Each run is a process of its own (peak RSS is per process, `peak_rss_mb`), alternated `repeats` times per dtype
(`_common.alternate`); single-frame
samples (one frame per camera), batch 16, pool 16, 2 workers. Reports samples/s over `batches` steady batches
(after 10), peak RSS and the buffers the host path kept.
"""

from __future__ import annotations

import argparse
import os
import time

from _common import alternate, child, spread, write_result

CHILD = r"""
import json, sys, time
from dali_stream.loader import StreamLoader
ds, dtype, route, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
info = json.load(open(ds + "/meta/info.json"))
cams = [k for k, v in info["features"].items() if v["dtype"] == "video"]
shape = info["features"][cams[0]]["shape"]
h, w = (shape[0], shape[1]) if shape[-1] == 3 else (shape[1], shape[2])
extra = {} if route == "host" else {"crop": (h, w)}
loader = StreamLoader(ds, batch_size=16, episode_pool_size=16, num_workers=2, decode="cpu", device="cpu",
                      image_dtype=dtype, drop_last=True, **extra)
it = iter(loader)
for _ in range(10):
    next(it)
t0, k = time.perf_counter(), 0
while k < n:
    try:
        next(it)
    except StopIteration:
        it = iter(loader)
        continue
    k += 1
seconds = time.perf_counter() - t0
RESULT = {"route": route, "dtype": dtype, "samples_per_s": n * 16 / seconds,
          "host_frames": loader.memory_budget()["host_frames"],
          "host_buffers_mb": loader.stats()["bounded"]["host_buffers"]["held"] / 2**20}
loader.close()
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    configs = [(dtype, route) for dtype in ("float32", "uint8") for route in ("graph", "host")]
    got = alternate(configs, args.repeats, lambda c: child(CHILD, args.dataset, *c, str(args.batches)))
    runs = [r for c in configs for r in got[c]]
    summary = {}
    for dtype in ("float32", "uint8"):
        rate = {r: [x["samples_per_s"] for x in got[(dtype, r)]] for r in ("graph", "host")}
        summary[dtype] = {"host_over_graph": spread(h / g for g, h in zip(rate["graph"], rate["host"])),
                          "graph_samples_per_s": rate["graph"], "host_samples_per_s": rate["host"]}
        print(f"{dtype}: host / graph = {summary[dtype]['host_over_graph']['median']:.2f}")
    if args.out:
        write_result(args.out, {"dataset": args.dataset, "batches": args.batches, "runs": runs, "summary": summary,
                                "cpu_count": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
