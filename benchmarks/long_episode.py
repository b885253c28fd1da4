"""The long-episode targets, measured: one hour-long 640x480 AV1 episode of 3 cameras, written as
lerobot's recorder writes (g=2, crf 30), read by a loader on its defaults (float32, 2 workers, batch 16).

- first batch after `iter()` <= 1 s (and the constructor's time);
- peak RSS within the cache bound plus the prepared batches (`memory_budget`), beside the imports' share;
- bytes read <= 2x the bytes of the GOPs the batches need (`bench.gop_bytes_needed`, from each file's index).

The loader runs in a fresh process (its peak RSS is the loader's alone, imports included: `imports_rss_gb` is the
process before the loader). The dataset is written on first use (long: three AV1 encodes of an hour each).

    python benchmarks/long_episode.py .demo/long-episode [--minutes 60] [--batches 50] \
        [--out benchmarks/results/cpu-2core-long-episode] [--segment-bytes N] [--fetch-workers N] \
        [--http-delay-ms MS]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

MEASURE = r"""
import json, resource, sys, time
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
import torch, nvidia.dali  # noqa: F401 - the imports' share of the peak
from dali_stream import StreamLoader
from dali_stream.tools.bench import gop_bytes_needed
rss_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
root, batches, extra = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
t0 = time.perf_counter()
loader = StreamLoader(root, batch_size=16, num_workers=2, device="cpu", **extra)
setup = time.perf_counter() - t0
pieces = loader.record_pieces()  # each piece's sample: the GOPs they need, exactly (`bench.gop_bytes_needed`)
t1 = time.perf_counter()
it = iter(loader)
next(it)
first = time.perf_counter() - t1
t2 = time.perf_counter()
for _ in range(batches - 1):
    next(it)
steady = time.perf_counter() - t2
loader.close()
stats = loader.stats()["fetch"]  # the store's counters (`StreamLoader.stats`)
remote = dict(loader.remote_stats)  # before gop_bytes_needed reads the MP4 indexes itself
gops = gop_bytes_needed(loader, pieces)
budget = loader.memory_budget()
print(json.dumps({
    "constructor_s": setup, "first_batch_s": first, "samples_per_s_after_first": 16 * (batches - 1) / steady,
    "batches": batches, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    "imports_rss_gb": rss_imports, "start_rss_gb": rss0,
    "segments_cut": stats["segments_cut"], "pieces_cut": stats["pieces_cut"], "piece_bytes": stats["piece_bytes"],
    "pieces_cut_ahead": stats["pieces_ahead"], "pieces_dropped": stats["pieces_dropped"],
    "pieces_ahead_peak": stats["pieces_ahead_peak"], "remote": remote, "settings": extra,
    "gop_bytes_needed": gops, "bytes_read_over_gops": stats["piece_bytes"] / gops if gops else None,
    "cache_peak": stats["peak_bytes"], "segment_bytes_limit": loader.resolved.segment_bytes, "routes": loader.routes,
    "memory_budget": budget,
}, default=str))
"""


def write(root: Path, minutes: float) -> None:
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    frames = int(minutes * 60 * 30)
    spec = SampleSpec(episodes=1, min_length=frames, max_length=frames, height=480, width=640, gop=2, crf=30,
                      recorder="lerobot", cameras=parse_cameras("front:av1,side:av1,wrist:av1"), seed=0)
    t0 = time.perf_counter()
    write_sample(root, spec, overwrite=True, workers=3,
                 progress=lambda done, total: print(f"  wrote {done}/{total} files ({time.perf_counter() - t0:.0f} s)",
                                                    flush=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset")
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--out", default="benchmarks/results/cpu-2core-long-episode")
    p.add_argument("--segment-bytes", type=int, default=None,
                   help="the loader's segment_bytes (default: its own; a large value reads the episode whole)")
    p.add_argument("--fetch-workers", type=int, default=None,
                   help="the loader's fetch_workers (default: its own; 0: no fetch or piece threads, builders cut)")
    p.add_argument("--http-delay-ms", type=float, default=None,
                   help="read the dataset over HTTP on loopback, every request answered this much later (the test "
                        "suite's server and latency proxy): a far-away store")
    args = p.parse_args()
    root = Path(args.dataset)
    if not (root / "meta/info.json").exists():
        print(f"writing a {args.minutes:g}-minute 640x480 AV1 episode of 3 cameras to {root} (once)", flush=True)
        write(root, args.minutes)
    settings = {k: v for k, v in (("segment_bytes", args.segment_bytes), ("fetch_workers", args.fetch_workers))
                if v is not None}
    with contextlib.ExitStack() as stack:
        source = str(root)
        if args.http_delay_ms is not None:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ helpers: server and proxy
            from tests.support.faultproxy import FaultProxy
            from tests.support.httpserver import Server

            upstream = stack.enter_context(Server(root))
            source = stack.enter_context(FaultProxy(upstream, delay_s=args.http_delay_ms / 1000))
        command = [sys.executable, "-c", MEASURE, source, str(args.batches), json.dumps(settings)]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["http_delay_ms"] = args.http_delay_ms
    result["dataset"] = str(root)
    result["video_bytes"] = sum(f.stat().st_size for f in (root / "videos").rglob("*.mp4"))
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"long-episode-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    keys = ("constructor_s", "first_batch_s", "samples_per_s_after_first", "peak_rss_gb", "imports_rss_gb",
            "segment_bytes_limit", "segments_cut", "cache_peak", "pieces_cut", "pieces_cut_ahead", "pieces_ahead_peak",
            "piece_bytes", "gop_bytes_needed", "bytes_read_over_gops", "video_bytes")
    print(json.dumps({k: result[k] for k in keys}, indent=2))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
