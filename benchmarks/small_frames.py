"""Small frames over a whole epoch, imports included: the loader against its decode limit and a lerobot-style
DataLoader, at the README sample's shape and LIBERO's.

    .venv/bin/python benchmarks/small_frames.py [--rounds 3] [--shapes sample-96x128,libero-256x256] [--out FILE]
    .venv/bin/python benchmarks/small_frames.py --rev REV [--rounds 5] [--out FILE]

The datasets are `host_path.py`'s, written by the project's sample writer in lerobot's recorder mode if missing
(three 96x128 cameras H.264, AV1, VP9; two 256x256 AV1 cameras at 10 fps). Each run is a process of its own, timed
from before `import torch`, the configurations alternated round by round:

- `loader`: `StreamLoader` with its defaults on the CPU (batch 16, float32 images, a pool of 16 episodes, 2
  workers; each open episode's cameras decoded once, front to back: `episode_frames_bytes`), one whole epoch;
- `per-sample`: the same with `episode_frames_bytes=0`: each sample's frames decoded from the keyframe before them;
- `dataloader-N`: the lerobot-style DataLoader `dali-stream bench` compares with (`tools/bench_baseline.py`:
  torchcodec per sample, float32) over as many samples, a seeded shuffle of every frame, N workers (0, 1, 2; the
  best of them is the baseline);
- `limit`: the loader's own decode calls for the same epoch (the batches of its plan, its segments) with nothing
  else, on 2 threads, segments fetched first: `per_sample` each batch's frames as asked, through warm decoders (the
  decode limit `dali-stream bench` reports without open episodes' frames), `whole` each episode's camera decoded
  once, front to back (the least decode work: the limit of the loader as it now decodes).

Samples/s are over the epoch, from before `import torch` (`with_start`) and from the first batch asked (`epoch`).

`--rev REV`: the `loader` configuration alone, this tree's against commit REV's (a `git worktree`, each run started
in its own tree), alternated round by round; their ratios within a round.
"""

from __future__ import annotations

import argparse
import sys

from _common import alternate, child, earlier_tree, spread, write_result
from host_path import ROOT, SHAPES, dataset

LOADER = r"""
import sys, time
t0 = time.perf_counter()
import torch
from dali_stream import StreamLoader
ds, held = sys.argv[1], sys.argv[2]
loader = StreamLoader(ds, device="cpu", seed=1, episode_frames_bytes=None if held == "auto" else int(held))
t1, n = time.perf_counter(), 0
for batch in loader:
    n += len(batch["index"])
t2 = time.perf_counter()
RESULT = {"samples": n, "with_start": n / (t2 - t0), "epoch": n / (t2 - t1), "start_s": t1 - t0,
          "held": loader.stats()["episode_frames"]}
loader.close()
"""

DATALOADER = r"""
import sys, time
t0 = time.perf_counter()
import numpy as np
import torch
from torch.utils.data import DataLoader
from dali_stream.meta.dataset import DatasetMeta
from dali_stream.tools.bench_baseline import LeRobotStyleDataset
ds, workers, samples = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
meta = DatasetMeta.open(ds)
dataset = LeRobotStyleDataset(meta, {})
order = np.random.default_rng(1).permutation(len(dataset))[:samples].tolist()
loader = DataLoader(dataset, batch_size=16, sampler=order, num_workers=workers, drop_last=True)
t1, n = time.perf_counter(), 0
for batch in loader:
    n += len(batch["index"])
t2 = time.perf_counter()
RESULT = {"samples": n, "with_start": n / (t2 - t0), "epoch": n / (t2 - t1), "start_s": t1 - t0}
"""

LIMIT = r"""
import sys, time
import numpy as np
from concurrent.futures import ThreadPoolExecutor
from dali_stream import StreamLoader
from dali_stream.decode.cpu import DecoderCache, warm_decoders
from dali_stream.decode.open_episodes import EpisodeFrames
from dali_stream.graph.dali_on_workers import DaliFrames
from dali_stream.graph.worker_decode import decode_segments
from dali_stream.tools.bench_gpu import window_work
ds, threads = sys.argv[1], 2
loader = StreamLoader(ds, device="cpu", seed=1)
assert not loader.stats()["engines"] and set(loader.memory_budget()["host_frames"]) == set(loader.routes)
work, samples = window_work(loader, [(0, i) for i in range(len(loader))], list(loader.routes))
dali = DaliFrames()
on_dali = set(loader.resolved.dali_on_workers)
frames = sum(int(sum(len(i) for i in idx)) for _, _, idx in work)


def timed(decode_batch):
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(decode_batch, work))
    return time.perf_counter() - t0


warm = DecoderCache(None)
for key, segs, _ in work:
    if key not in on_dali:
        for seg in segs:
            warm_decoders(seg, threads, warm)
if on_dali:  # DALI's library loaded before timing
    dali([(next(segs[0] for key, segs, _ in work if key in on_dali), np.zeros(1, np.int64))])


def per_sample(w):
    key, segs, idx = w
    for _ in decode_segments(segs, idx, warm, decode=dali if key in on_dali else None):
        pass


held = EpisodeFrames(1 << 40)
cold = DecoderCache(None)  # decoders opened as the loader opens them: once an episode's camera


def whole(w):
    key, segs, idx = w
    for _ in decode_segments(segs, idx, cold, decode=dali if key in on_dali else None, episodes=held):
        pass


per_sample_s = timed(per_sample)
whole_s = timed(whole)
RESULT = {"samples": samples, "frames": frames, "per_sample": samples / per_sample_s, "whole": samples / whole_s,
          "whole_frames_decoded": held.frames}
loader.close()
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)}")
    ap.add_argument("--workers", default="0,1,2", help="the DataLoader's worker counts")
    ap.add_argument("--rev", help="an earlier commit whose loader alternates with this tree's (the loader alone)")
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-small-frames/small_frames.json")
    args = ap.parse_args(argv)
    shapes = args.shapes.split(",")
    paths = {s: dataset(s) for s in shapes}
    command = "python benchmarks/small_frames.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.rev:
        return against(args.rev, shapes, paths, args.rounds, args.out, command)
    samples = {s: child(LOADER, paths[s], "0", cwd=ROOT)["samples"] for s in shapes}  # the epoch's, untimed
    kinds = ["loader", "per-sample", "limit"] + [f"dataloader-{w}" for w in args.workers.split(",")]
    configs = [(shape, kind) for shape in shapes for kind in kinds]

    def run(config):
        shape, kind = config
        if kind in ("loader", "per-sample"):
            return child(LOADER, paths[shape], "auto" if kind == "loader" else "0", cwd=ROOT)
        if kind == "limit":
            return child(LIMIT, paths[shape], cwd=ROOT)
        return child(DATALOADER, paths[shape], kind.split("-")[1], str(samples[shape]), cwd=ROOT)

    got = alternate(configs, args.rounds, run)
    summary: dict = {}
    for shape in shapes:
        runs = {kind: got[(shape, kind)] for kind in kinds}
        best = max((k for k in kinds if k.startswith("dataloader")),
                   key=lambda k: spread(r["with_start"] for r in runs[k])["median"])
        rounds = range(args.rounds)
        part = {kind: {m: spread(r[m] for r in runs[kind]) for m in ("with_start", "epoch") if m in runs[kind][0]}
                for kind in kinds if kind != "limit"}
        part["limit"] = {m: spread(r[m] for r in runs["limit"]) for m in ("per_sample", "whole")}
        part["best_dataloader"] = best
        for kind in ("loader", "per-sample"):
            for m in ("with_start", "epoch"):  # ratios within each round
                part[f"{kind} {m} / limit per_sample"] = spread(
                    runs[kind][r][m] / runs["limit"][r]["per_sample"] for r in rounds)
                part[f"{kind} {m} / limit whole"] = spread(runs[kind][r][m] / runs["limit"][r]["whole"] for r in rounds)
                part[f"{kind} {m} / {best} {m}"] = spread(runs[kind][r][m] / runs[best][r][m] for r in rounds)
        summary[shape] = part
    result = {"command": command, "rounds": args.rounds, "samples": samples, "summary": summary,
              "runs": {" ".join(c): got[c] for c in configs}}
    print(write_result(args.out, result))
    return 0


def against(rev: str, shapes: list[str], paths: dict, rounds: int, out: str, command: str) -> int:
    """The loader of this tree against commit `rev`'s, alternated (`--rev`)."""
    with earlier_tree(rev, ROOT) as before:
        configs = [(shape, tree) for shape in shapes for tree in ("after", "before")]
        got = alternate(configs, rounds, lambda c: child(LOADER, paths[c[0]], "auto",
                                                          cwd=ROOT if c[1] == "after" else before))
    summary = {shape: {**{f"{tree} {m}": spread(r[m] for r in got[(shape, tree)]) for tree in ("after", "before")
                          for m in ("with_start", "epoch")},
                       **{f"after / before {m}": spread(a[m] / b[m] for a, b in zip(got[(shape, "after")],
                                                                                   got[(shape, "before")]))
                          for m in ("with_start", "epoch")}} for shape in shapes}
    print(write_result(out, {"command": command, "rev": rev, "rounds": rounds, "summary": summary,
                             "runs": {" ".join(c): got[c] for c in configs}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
