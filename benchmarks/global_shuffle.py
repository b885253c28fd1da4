"""A global shuffle (episode_pool_size='all') against the default pool of 16, local and over HTTP, in one run.

    .venv/bin/python benchmarks/global_shuffle.py [DATASET] [--batches 150] [--warmup 250] [--delay-ms 50]
        [--rounds 2] [--out benchmarks/results/cpu-2core-global-shuffle/global_shuffle.json]

DATASET defaults to .demo/global-2000: 2,000 episodes of 40-80 frames, one 320x240 H.264 camera at GOP 2, crf 30,
written as lerobot's recorder writes them (`dali-stream make-sample --recorder lerobot`; ~15 min on 2 cores, once).
Each run is a child process of its own (its peak RSS is its own): batch 64, 2 workers, uint8 frames on the CPU,
`--warmup` batches, then `--batches` batches timed. Three loaders, pool 16, 'all' (this dataset's
episodes fit in half of cache_bytes: held whole) and 'all' with every sample's GOPs read alone (as for a share
that does not fit, forced by segment_bytes=1), each from local disk and over HTTP, the six runs alternated
`--rounds` times (`_common.alternate`), ratios taken within a round, median and range; each run reports
samples/s (over the warm-up too), the first batch's latency, peak RSS, and how the batches mix (distinct episodes
per batch, episodes touched per 100 batches, repeats within pool/batch batches: `dali_stream.tools.mixing_stats`)
beside a shuffled DataLoader's on the same episodes. The remote runs (pool 16, 'all', 'all' in pieces) read the
same dataset from a loopback HTTP store that answers every GET after `--delay-ms` (benchmarks/far_store.py, a
process of its own on the same cores), and report the requests and bytes read against the bytes of the GOPs the
timed batches need. Every run reports the loader's CPU time per sample (all its threads): the store shares the 2
cores, so over HTTP the rate measures the two together, the CPU per sample the loader alone.
Ratios within a round are what to read: absolute rates move +-20 % on a shared 2-core VM.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from _common import alternate, spread, within_rounds, write_result

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = dict(episodes=2000, min_length=40, max_length=80, cameras="front:h264", height=240, width=320, gop=2,
              crf=30, recorder="lerobot")


def _child(source: str, pool, warmup: int, batches: int, out, segment_bytes) -> None:
    sys.path.insert(0, str(ROOT))
    from dali_stream import StreamLoader
    from dali_stream.tools.bench import batch_mixing, gop_bytes_needed

    t0 = time.perf_counter()
    loader = StreamLoader(source, batch_size=64, episode_pool_size=pool, device="cpu", num_workers=2,
                          image_dtype="uint8", seed=0, segment_bytes=segment_bytes)
    log = loader.record_pieces()
    it = iter(loader)
    next(it)
    first_s = time.perf_counter() - t0
    t = time.perf_counter()
    for _ in range(warmup):
        next(it)
    warmup_rate = warmup * 64 / (time.perf_counter() - t)
    remote0 = dict(loader.remote_stats or {})
    logged = len(log)
    t, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(it)
    wall = time.perf_counter() - t
    cpu = time.process_time() - cpu  # every thread of this process: what the loader costs whoever serves it
    result = {"pool": pool if segment_bytes is None else f"{pool}, in pieces", "samples_per_s": batches * 64 / wall, "first_batch_s": first_s,
              "warmup_samples_per_s": warmup_rate, "cpu_ms_per_sample": 1000 * cpu / (batches * 64),
              "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
              "batch_mixing": batch_mixing(loader)}
    remote = loader.remote_stats
    if remote:
        pieces = log[logged:]
        result["remote"] = {"requests": remote["requests"] - remote0.get("requests", 0),
                            "bytes_read": remote["bytes"] - remote0.get("bytes", 0),
                            "pieces": len(pieces), "gop_bytes_needed": gop_bytes_needed(loader, pieces) if pool == "all"
                            else None, "note": "requests and bytes over the timed batches (and what the loader "
                                               "read ahead for later ones); GOP bytes: the timed pieces' own"}
    it.close()
    loader.close()
    out.put(result)


def run(source: str, pool, warmup: int, batches: int, segment_bytes: int | None = None) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(source, pool, warmup, batches, out, segment_bytes))
    proc.start()
    result = out.get()
    proc.join()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?", default=str(ROOT / ".demo/global-2000"))
    ap.add_argument("--batches", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=250)
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the six runs, alternated (default %(default)s)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/cpu-2core-global-shuffle/global_shuffle.json"))
    args = ap.parse_args()
    if not Path(args.dataset).exists():
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in SAMPLE.items()]
        subprocess.run([sys.executable, "-m", "dali_stream", "make-sample", args.dataset, *flags], check=True)
    # 'all' in pieces: a share larger than half of cache_bytes, every sample reads its GOPs alone (forced here by
    # segment_bytes=1)
    runs = {16: (16, None), "all": ("all", None), "all, in pieces": ("all", 1)}  # name -> pool, segment_bytes
    server = subprocess.Popen([sys.executable, str(ROOT / "benchmarks/far_store.py"), args.dataset,
                               f"--delay-ms={args.delay_ms}"], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip() if server.stdout else ""
        configs = [(where, name) for name in runs for where in ("local", "remote")]
        got = alternate(configs, args.rounds, lambda c: run(
            args.dataset if c[0] == "local" else url, runs[c[1]][0], args.warmup, args.batches, runs[c[1]][1]),
            say=lambda line: print(line[:300], flush=True))
    finally:
        server.kill()
    local = {name: got[("local", name)] for name in runs}
    remote = {name: got[("remote", name)] for name in runs}

    summary = {
        "global_over_pool16_samples_per_s": within_rounds(local["all"], local[16], "samples_per_s"),
        "global_over_pool16_peak_rss": within_rounds(local["all"], local[16], "peak_rss_gb"),
        "global_first_batch_s": spread(r["first_batch_s"] for r in local["all"]),
        "global_in_pieces_over_pool16_samples_per_s": within_rounds(local["all, in pieces"], local[16],
                                                                    "samples_per_s"),
        "remote_global_over_local_global": within_rounds(remote["all"], local["all"], "samples_per_s"),
        "remote_global_in_pieces_over_local_in_pieces": within_rounds(remote["all, in pieces"],
                                                                      local["all, in pieces"], "samples_per_s"),
        # the loader's CPU per sample over HTTP against locally: where the store is another machine (not a process
        # on the same 2 cores), this, not the rate, is what remote reads cost
        "remote_over_local_cpu_per_sample": {
            str(name): within_rounds(remote[name], local[name], "cpu_ms_per_sample") for name in runs},
        "remote_pool16_over_local_pool16": within_rounds(remote[16], local[16], "samples_per_s"),
    }
    report = {"dataset": args.dataset, "sample": SAMPLE, "batch_size": 64, "num_workers": 2, "warmup": args.warmup,
              "batches": args.batches, "delay_ms": args.delay_ms, "rounds": args.rounds, "host": platform.node(),
              "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "summary": summary,
              "local": {str(k): v for k, v in local.items()}, "remote": {str(k): v for k, v in remote.items()}}
    write_result(args.out, report)
    print(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
