"""Threads or processes for the CPU (torchcodec) route? Same decode work, both ways, one run.

    .venv/bin/python benchmarks/cpu_decode_parallelism.py [DATASET] [--batches 40] [--workers 2] [--rounds 3]
        [--out FILE]

The work is StreamLoader's own: the first `--batches` batch plans (batch 16, pool 16, mode single) of
every camera, each (batch, camera) decoded as the loader does (one `get_frames_at` per segment per batch).

- threads: a ThreadPoolExecutor, each thread with its own decoder per segment (what the loader does;
  torchcodec releases the GIL while decoding).
- processes: a spawn-started process pool; each worker process keeps its own decoders per segment (sent
  once per worker: segments are routed to a fixed worker) and returns the frames pickled.

Decoders are opened before timing in both cases; the process pool's start-up is reported separately. One
thread, the threads and the processes alternate, `--rounds` times (`_common.alternate`): frames/s and the
processes' rate over the threads' of the same round, median and range over the rounds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from _common import alternate, spread, within_rounds, write_result

_WORKER_DECODERS: dict = {}


def _worker_decode(key, data, indices):
    """Runs in a worker process: decode `indices` of the segment `key` (bytes sent on first use)."""
    from dali_stream.decode.cpu import open_decoder

    dec = _WORKER_DECODERS.get(key)
    if dec is None:
        dec = _WORKER_DECODERS[key] = open_decoder(data)
    return dec.get_frames_at(indices=[int(i) for i in indices]).data.numpy()


def _work(dataset: str, batches: int):
    from dali_stream.loader import StreamLoader

    loader = StreamLoader(dataset, batch_size=16, episode_pool_size=16, decode="cpu", device="cpu", num_workers=0)
    items = []  # (segment, unique frame indices) per (batch, camera, segment)
    for b in range(batches):
        plan = loader.batch_plan(0, b)
        for key in loader.routes:
            segs, idx = loader.locate(plan, key)
            groups: dict[int, tuple] = {}
            for seg, i in zip(segs, idx):
                groups.setdefault(id(seg), (seg, []))[1].extend(int(x) for x in i)
            items.extend((seg, np.unique(ix)) for seg, ix in groups.values())
    return loader, items


def run_threads(items, workers: int) -> float:
    from dali_stream.decode.cpu import DecoderCache, torchcodec_frames, warm_decoders

    cache = DecoderCache(None)
    for seg, _ in items:
        warm_decoders(seg, workers, cache)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(lambda it: torchcodec_frames(*it, cache), items):
            pass
    return time.perf_counter() - t0


def run_processes(items, workers: int) -> tuple[float, float]:
    ctx = mp.get_context("spawn")
    t0 = time.perf_counter()
    pools = [ctx.Pool(1) for _ in range(workers)]  # one process each: segment affinity by routing
    keys = {id(seg): n for n, (seg, _) in enumerate(dict((id(s), (s, None)) for s, _ in items).values())}
    route = {k: n % workers for k, n in keys.items()}
    # Warm: every worker opens its segments' decoders (and pays torch/torchcodec import) before timing.
    warm = [pools[route[id(seg)]].apply_async(_worker_decode, (id(seg), seg.data, [0])) for seg, _ in
            dict((id(s), (s, None)) for s, _ in items).values()]
    for w in warm:
        w.get()
    startup = time.perf_counter() - t0
    t0 = time.perf_counter()
    pending = [pools[route[id(seg)]].apply_async(_worker_decode, (id(seg), None, idx)) for seg, idx in items]
    for p in pending:
        p.get()
    seconds = time.perf_counter() - t0
    for p in pools:
        p.close()
        p.join()
    return seconds, startup


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", nargs="?", default=".demo/bench-g2")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the three runs, alternated (default %(default)s)")
    ap.add_argument("--out", default=None, help="write the result as JSON to this file")
    args = ap.parse_args(argv)
    loader, items = _work(args.dataset, args.batches)
    frames = int(sum(len(ix) for _, ix in items))
    configs = {"1 thread": lambda: run_threads(items, 1), f"{args.workers} threads": lambda: run_threads(
        items, args.workers), f"{args.workers} processes": lambda: run_processes(items, args.workers)}

    def run(name: str) -> dict:
        got = configs[name]()
        seconds, startup = got if isinstance(got, tuple) else (got, None)
        return {"frames_per_s": frames / seconds, **({} if startup is None else {"pool_startup_s": startup})}

    got = alternate(list(configs), args.rounds, run)
    threads, procs = got[f"{args.workers} threads"], got[f"{args.workers} processes"]
    result = {"dataset": args.dataset, "batches": args.batches, "workers": args.workers, "frames": frames,
              "rounds": args.rounds, "cpu_cores": len(os.sched_getaffinity(0)), "machine": platform.machine(),
              "date": time.strftime("%Y-%m-%d"),
              "frames_per_s": {k: spread(r["frames_per_s"] for r in rs) for k, rs in got.items()},
              "process_pool_startup_s": spread(r["pool_startup_s"] for r in procs),
              "processes_over_threads": within_rounds(procs, threads, "frames_per_s"), "runs": got}
    loader.close()
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    if args.out:
        write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
