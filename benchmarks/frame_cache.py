"""Decode once, train many epochs: the decoded-frame cache (`frame_cache_bytes`, `frame_cache_dir`) measured.

    .venv/bin/python benchmarks/frame_cache.py policy [--out policy.json]
    .venv/bin/python benchmarks/frame_cache.py epochs [DATASET] [--runs 3] [--resize H W] [--decode cpu]
                                                  [--image-dtype uint8] [--only plain,cached] [--rev REV]
                                                  [--out epochs.json]

`policy`: which frames to keep when the decoded dataset does not fit the bound, on the planner's own batches
(no decoding: each epoch's (episode, frame) draws, 2,000 episodes of 30-90 frames, batch 64): the hit rate of
epochs 2 and 3 for a least-recently-used cache and for the cache's policy (admit while there is room, never
evict), at bounds of 1/4, 1/2 and 9/10 of the dataset's frames, for a pool of 16 and for a global shuffle.

`epochs`: samples/s of epochs 1, 2 and 3 with the cache (epoch 2 also decodes the frames of epoch 1's dropped last
batch, `drop_last`: epoch 3 reads every frame it shows), against the loader without it (epoch 1's draws) and a
lerobot-style DataLoader (`tools/baseline.py`), on DATASET (default: the bench's `av1-quick` sample, two 640x480 AV1
cameras as lerobot writes them, GOP 2, crf 30), batch 16, 2 workers, uint8 (`--image-dtype float32`: lerobot's default
images, in [0, 1]; `--memory-format`: the layout, CHW by default); each configuration a process of its own, alternated
over `--runs` rounds (median and range); each process's peak RSS. Then the spill: a memory bound of a quarter of the
decoded dataset and `frame_cache_dir` in a temporary folder: epoch 2 (from memory and disk) against epoch 1. With them,
what a new 4 KB page costs this machine (`first_touch_us`) and the CPU seconds epoch 1 spends on the kept frames' pages,
against epoch 1's CPU without the cache (which reuses its pages where the cache keeps them). `--resize H W`: every
loader resizes (the DataLoader does not: it decodes as before), and the cache keeps frames resized by the workers
(`Resolved.shaped_on_workers`); the bound is then 1.1x the resized frames. `--decode`: the loaders' `decode=` (default
cpu: torchcodec; auto gives VP8/VP9 to DALI's CPU decoder, in the graph without the cache and on the workers with it).
`floor`: the layout alone, the same batches' frames laid out from memory by the loader's own `graph.host.lay_out` on
2 threads into reused buffers, nothing else (`_floor`): what a later epoch could reach on this machine at best, and
epoch 2 and 3 against it. Epoch 2 and the floor are also taken against the loader without the cache
(`epoch2_over_plain`, `floor_over_plain`): epoch 1 with the cache pays for the new pages of every frame it keeps,
which costs a VM more on some days than others, and moves every ratio over epoch 1 with it. `--partial`: a dataset
that does not fit: the loader without the cache against one whose bound holds a quarter of the frames and no
folder, epochs 1 and 2. `--only`: some of the configurations (plain, cached,
baseline, spill, floor), e.g. `plain,cached` for epoch 2 over epoch 1 alone. `--rev REV`: the plain and cached loaders of
an earlier commit (a `git worktree`) alternate with this tree's, and their ratios are taken round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import alternate, bench_sample, child, earlier_tree, spread  # noqa: E402


# ---- policy -----------------------------------------------------------------------------------------------
def _draws(lengths: np.ndarray, pool: int | None, epoch: int) -> list[tuple[int, int]]:
    from dali_stream.plan.epoch import PlanConfig, resume_plan
    from dali_stream.plan.world import World

    plan = resume_plan(lengths, PlanConfig(batch_size=64, pool_size=pool, seed=0), World(), epoch, [])
    out = []
    for i in range(plan.num_batches):
        b = plan.batch(i)
        out += list(zip(b.episodes.tolist(), b.frames.tolist()))
    return out


def _hits(epochs: list[list[tuple[int, int]]], capacity: int, lru: bool) -> list[float]:
    kept: OrderedDict = OrderedDict()
    rates = []
    for draws in epochs:
        hits = 0
        for key in draws:
            if key in kept:
                hits += 1
                if lru:
                    kept.move_to_end(key)
            elif lru:
                kept[key] = True
                if len(kept) > capacity:
                    kept.popitem(last=False)
            elif len(kept) < capacity:
                kept[key] = True
        rates.append(hits / len(draws))
    return rates


def policy(out: str | None) -> None:
    lengths = np.random.default_rng(0).integers(30, 91, 2000)
    total = int(lengths.sum())
    result: dict = {"episodes": len(lengths), "frames": total, "batch": 64, "runs": []}
    print("| sampling | bound / dataset | LRU: epoch 2, 3 hits | admit once: epoch 2, 3 hits |")
    print("|---|---|---|---|")
    for name, pool in (("pool 16", 16), ("global shuffle", None)):
        epochs = [_draws(lengths, pool, e) for e in range(3)]
        for ratio in (0.25, 0.5, 0.9):
            cap = int(total * ratio)
            lru, once = _hits(epochs, cap, True)[1:], _hits(epochs, cap, False)[1:]
            result["runs"].append({"sampling": name, "ratio": ratio, "lru": lru, "admit_once": once})
            print(f"| {name} | {ratio} | {lru[0]:.3f}, {lru[1]:.3f} | {once[0]:.3f}, {once[1]:.3f} |", flush=True)
    if out:
        Path(out).write_text(json.dumps(result, indent=2))


# ---- epochs -----------------------------------------------------------------------------------------------
def _child(dataset: str, kind: str, cache_bytes: int, folder: str | None, layout: str = "contiguous",
           resize: tuple[int, int] | None = None, decode: str = "cpu", dtype: str = "uint8") -> dict:
    """One configuration in this process: samples/s of its epochs (`kind`: plain, cached, spill, baseline)."""
    import torch

    torch.set_num_threads(1)
    if kind == "baseline":  # lerobot's shape: a map dataset decoding each sample, shuffled, 2 workers
        from torch.utils.data import DataLoader

        from dali_stream.meta.dataset import DatasetMeta
        from dali_stream.tools.bench_baseline import LeRobotStyleDataset

        data = DataLoader(LeRobotStyleDataset(DatasetMeta.open(dataset), {}), batch_size=16, shuffle=True,
                          num_workers=2, drop_last=True)
        t0, n = time.perf_counter(), 0
        for batch in data:
            n += len(batch["index"])
        return {"epochs": [n / (time.perf_counter() - t0)]}
    from dali_stream import StreamLoader

    args = dict(batch_size=16, num_workers=2, device="cpu", decode=decode, image_dtype=dtype, memory_format=layout,
                resize=resize)
    if kind != "plain":
        args.update(frame_cache_bytes=cache_bytes, frame_cache_dir=folder)
    loader = StreamLoader(dataset, **args)
    rates, samples = [], 0
    for _ in range(1 if kind == "plain" else 3 if kind == "cached" else 2):
        t0, n = time.perf_counter(), 0
        for batch in loader:
            n += len(batch["index"])
        rates.append(n / (time.perf_counter() - t0))
        samples = samples or n
    stats = loader.stats()
    loader.close()
    return {"epochs": rates, "samples": samples, "frames": stats["frames"],
            "decoded_bytes": stats["bounded"]["decoded_frames"]["held"],
            "routes": dict(loader.routes)}


def _floor(dataset: str, layout: str = "contiguous", dtype: str = "uint8", batch: int = 16, threads: int = 2,
           epochs: int = 3) -> dict:
    """The layout's floor: an epoch's batches laid out from frames in memory as the cache holds them (every camera's
    every frame, (H, W, 3), or (3, H, W) where the loader keeps them so: `Resolved.kept_chw`), by the loader's own
    `graph.host.lay_out` into reused batch buffers on `threads` threads, and nothing else: no plan, decode, tables
    or hand-off. What a later epoch from the cache could reach on this machine at best (its memory's speed)."""
    from concurrent.futures import ThreadPoolExecutor

    from dali_stream.decode.frame_cache import frame_bytes
    from dali_stream.graph.host import host_dtype, host_shape, lay_out
    from dali_stream.graph.imageops import ImageOps
    from dali_stream.loader.resolve import KEPT_CHW_BYTES
    from dali_stream.meta.dataset import DatasetMeta

    meta = DatasetMeta.open(dataset)
    ops = ImageOps.make(dtype=dtype, channels_last=layout == "channels_last")
    n = meta.total_frames
    cams = []  # (frames, chw): every frame written once, so that each is in memory of its own as the cache's are
    for cam in meta.cameras.values():
        chw = not ops.channels_last and frame_bytes(cam.height, cam.width, None) <= KEPT_CHW_BYTES
        shape = (n, 3, cam.height, cam.width) if chw else (n, cam.height, cam.width, 3)
        cams.append((np.full(shape, 7, np.uint8), chw))
    order = np.random.default_rng(0).permutation(n)[:n - n % batch].reshape(-1, batch)
    local = threading.local()

    def build(samples: np.ndarray) -> None:
        bufs = getattr(local, "bufs", None)
        if bufs is None:  # a few buffers per thread, reused as the loader's pool reuses them
            bufs = local.bufs = [[np.empty(host_shape(ops, batch, 1, *f.shape[-2:] if chw else f.shape[1:3]),
                                           host_dtype(ops)) for f, chw in cams] for _ in range(3)]
            local.turn = 0
        local.turn = (local.turn + 1) % len(bufs)
        for out, (frames, chw) in zip(bufs[local.turn], cams):
            lay_out(out, [frames[i] for i in samples], ops, chw)

    rates = []
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(epochs):
            t0 = time.perf_counter()
            list(pool.map(build, order))
            rates.append(order.size / (time.perf_counter() - t0))
    return {"epochs": rates, "samples": int(order.size)}


def _run(dataset: str, kind: str, cache_bytes: int = 0, folder: str | None = None, layout: str = "contiguous",
         resize: tuple[int, int] | None = None, decode: str = "cpu", dtype: str = "uint8", tree: Path = ROOT) -> dict:
    """One configuration in a process of its own, running `tree`'s `dali_stream` (its working folder)."""
    if kind == "floor":
        return child(f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); from frame_cache import _floor; "
                     f"RESULT = _floor({dataset!r}, {layout!r}, {dtype!r})", cwd=tree)
    return child(f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); from frame_cache import _child; "
                 f"RESULT = _child({dataset!r}, {kind!r}, {cache_bytes}, {folder!r}, {layout!r}, {resize!r}, "
                 f"{decode!r}, {dtype!r})", cwd=tree)


def first_touch_us(size: int = 1 << 30, runs: int = 3) -> float:
    """Microseconds this machine takes to give a process a new 4 KB page of memory (the kernel's fault, its zeroing,
    on a VM the host's): the median of `runs` fresh `size`-byte anonymous mappings written once a page. The cache's
    epoch 1 pays it for every page of frames it keeps; the loader without the cache reuses its pages."""
    import mmap

    times = []
    for _ in range(runs):
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        view = np.frombuffer(m, np.uint8)
        t0 = time.perf_counter()
        view[::4096] = 1
        times.append((time.perf_counter() - t0) / (size // 4096) * 1e6)
        del view
        m.close()
    return float(np.median(times))


def _decoded_bytes(dataset: str, resize: tuple[int, int] | None = None) -> int:
    from dali_stream.graph.imageops import ImageOps
    from dali_stream.meta.dataset import DatasetMeta
    from dali_stream.tools.bench_cache import decoded_bytes

    return decoded_bytes(DatasetMeta.open(dataset), ImageOps.make(resize=resize) if resize else None)


ALL = ("plain", "cached", "baseline", "spill", "floor")
PARTIAL = ("plain", "partial")


def epochs(dataset: str | None, runs: int, out: str | None, layout: str, resize: tuple[int, int] | None = None,
           decode: str = "cpu", configs: tuple[str, ...] = ALL, dtype: str = "uint8", rev: str | None = None) -> None:
    if dataset is None:
        dataset = bench_sample("av1-quick")
    decoded = _decoded_bytes(dataset, resize)
    bound = int(decoded * 1.1)
    print(f"{dataset}: decoded frames {decoded / 2**30:.2f} GiB; frame_cache_bytes {bound / 2**30:.2f} GiB", flush=True)

    def run(kind: str, tree: Path = ROOT) -> dict:
        if kind.startswith("before "):  # the earlier commit's loader (`--rev`)
            return run(kind.removeprefix("before "), before or ROOT)
        if kind == "partial":  # a quarter of the frames fit, no folder: the rest decoded every epoch
            return _run(dataset, kind, decoded // 4, None, layout, resize, decode, dtype, tree)
        if kind != "spill":
            return _run(dataset, kind, bound, None, layout, resize, decode, dtype, tree)
        with tempfile.TemporaryDirectory(dir=ROOT / ".demo") as folder:
            return _run(dataset, "spill", decoded // 4, folder, layout, resize, decode, dtype, tree)

    with earlier_tree(rev, ROOT) as before:
        kinds = configs + tuple(f"before {k}" for k in configs if k in ("plain", "cached") and before is not None)
        rows = alternate(kinds, runs, run, lambda line: print(line, flush=True))
    if configs == PARTIAL:
        plain, part = [x["epochs"][0] for x in rows["plain"]], rows["partial"]
        summary = {"dataset": dataset, "memory_format": layout, "resize": resize, "decode": decode,
                   "decoded_bytes": decoded, "frame_cache_bytes": decoded // 4, "runs": runs,
                   "plain_samples_per_s": spread(plain),
                   "partial_epoch1_over_plain": spread([x["epochs"][0] / a for a, x in zip(plain, part)]),
                   "partial_epoch2_over_plain": spread([x["epochs"][1] / a for a, x in zip(plain, part)]),
                   "peak_rss_mb": {k: spread([x["peak_rss_mb"] for x in v]) for k, v in rows.items()}, "rows": rows}
        print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
        if out:
            Path(out).write_text(json.dumps(summary, indent=2))
        return

    def col(kind: str, epoch: int) -> list[float]:  # samples/s of one epoch of `kind`'s runs (none: not run)
        return [x["epochs"][epoch] for x in rows.get(kind, [])]

    def med(values) -> dict | None:  # (a configuration `--only` left out: None)
        values = list(values)
        return spread(values) if values else None

    plain, base = col("plain", 0), col("baseline", 0)
    floor = [float(np.median(x["epochs"][1:])) for x in rows.get("floor", [])]  # its first epoch warms up
    e1, e2, e3, s1, s2 = col("cached", 0), col("cached", 1), col("cached", 2), col("spill", 0), col("spill", 1)
    touch = first_touch_us()
    touch_cpu_s, cores = touch * decoded / 4096 / 1e6, len(os.sched_getaffinity(0))
    summary = {
        "dataset": dataset, "memory_format": layout, "image_dtype": dtype, "resize": resize, "decode": decode,
        "decoded_bytes": decoded, "frame_cache_bytes": bound, "runs": runs,
        "routes": rows["cached"][0].get("routes") if "cached" in rows else None,
        "plain_samples_per_s": med(plain), "baseline_samples_per_s": med(base),
        "epoch1_samples_per_s": med(e1), "epoch2_samples_per_s": med(e2),
        "epoch2_over_epoch1": med(b / a for a, b in zip(e1, e2)),
        "epoch3_samples_per_s": med(e3), "epoch3_over_epoch1": med(b / a for a, b in zip(e1, e3)),
        "epoch2_over_baseline": med(b / a for a, b in zip(base, e2)),
        # the layout alone from frames in memory (`_floor`, its later epochs): the most a later epoch could run here
        "floor_samples_per_s": med(floor), "epoch2_over_floor": med(b / a for a, b in zip(floor, e2)),
        "epoch3_over_floor": med(b / a for a, b in zip(floor, e3)),
        "floor_over_epoch1": med(b / a for a, b in zip(e1, floor)),
        "epoch1_over_plain": med(b / a for a, b in zip(plain, e1)),
        # against the loader without the cache: the cache's own epoch 1 also pays for its kept frames' new pages,
        # whose cost on a VM moves from day to day, and with it any ratio over epoch 1
        "epoch2_over_plain": med(b / a for a, b in zip(plain, e2)),
        "floor_over_plain": med(b / a for a, b in zip(plain, floor)),
        "peak_rss_mb": {k: spread(x["peak_rss_mb"] for x in v) for k, v in rows.items()},
        "spill_epoch2_over_epoch1": med(b / a for a, b in zip(s1, s2)),
        # the CPU seconds epoch 1 spends on the kept frames' new pages, and that against epoch 1's CPU seconds
        # without the cache (2 workers on every core of the machine: the loader's CPU-bound epoch)
        "first_touch_us_per_page": touch, "first_touch_cpu_s": touch_cpu_s,
        "first_touch_share_of_plain_epoch1": med(touch_cpu_s / (x["samples"] / x["epochs"][0] * cores)
                                                 for x in rows.get("plain", [])),
        "rows": rows,
    }
    if rev is not None:  # the earlier commit's loader, alternated with this tree's
        b1, b2 = col("before cached", 0), col("before cached", 1)
        summary["before"] = {"rev": rev, "plain_samples_per_s": med(col("before plain", 0)),
                             "epoch1_samples_per_s": med(b1), "epoch2_samples_per_s": med(b2),
                             "epoch2_over_epoch1": med(b / a for a, b in zip(b1, b2))}
        summary["after_over_before"] = {"epoch1": med(a / b for a, b in zip(e1, b1)),
                                        "epoch2": med(a / b for a, b in zip(e2, b2)),
                                        "plain": med(a / b for a, b in zip(plain, col("before plain", 0)))}
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    if out:
        Path(out).write_text(json.dumps(summary, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("policy")
    p.add_argument("--out")
    e = sub.add_parser("epochs")
    e.add_argument("dataset", nargs="?")
    e.add_argument("--runs", type=int, default=3)
    e.add_argument("--memory-format", default="contiguous", choices=("contiguous", "channels_last"))
    e.add_argument("--resize", nargs=2, type=int, metavar=("H", "W"))
    e.add_argument("--decode", default="cpu", choices=("cpu", "auto", "cpu-open", "dali-cpu"))
    e.add_argument("--image-dtype", default="uint8", choices=("uint8", "float32"))
    e.add_argument("--only", help=f"some of {','.join(ALL)}")
    e.add_argument("--rev", help="an earlier commit whose plain and cached loaders alternate with this tree's")
    e.add_argument("--partial", action="store_true", help="only the loader without the cache against one whose "
                   "bound holds a quarter of the frames (no folder): the dataset does not fit")
    e.add_argument("--out")
    args = ap.parse_args()
    if args.what == "policy":
        policy(args.out)
    else:
        epochs(args.dataset, args.runs, args.out, args.memory_format, tuple(args.resize) if args.resize else None,
               args.decode, PARTIAL if args.partial else tuple(args.only.split(",")) if args.only else ALL,
               args.image_dtype, args.rev)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
