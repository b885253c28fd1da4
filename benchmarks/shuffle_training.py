"""Does the pool matter for training? One small policy trained the same number of steps from the same seed on
batches from pool 16, from the global shuffle (episode_pool_size='all') and from a shuffled torch DataLoader over a
LeRobotDataset-style map dataset; validation loss on held-out episodes, in one run.

    .venv/bin/python benchmarks/shuffle_training.py [DATASET] [--steps 600] [--eval-every 150] [--seed 0 [1 ...]]
        [--out benchmarks/results/cpu-2core-global-shuffle/shuffle_training.json]

`--seed 1 2` repeats the three runs for each seed given (it draws the initial weights and every loader's order).

DATASET defaults to the global-shuffle benchmark's (benchmarks/global_shuffle.py: 2,000 lerobot-written GOP-2
episodes, one 320x240 H.264 camera, 6-dof state and action). The last 10 % of the episodes are held out. The
policy is `dali-stream train`'s built-in one (a strided convolution pooled over the camera, concatenated with the
state, two linear layers to the action), state and action normalised by the dataset's stats; Adam, lr 1e-3,
batch 64, the same initial weights for every run. Validation: MSE over every frame of the held-out episodes (an
evaluation pass, shuffle=False) every `--eval-every` steps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CAMERA = "observation.images.front"


def _norm(meta):
    import torch

    stats = meta.stats
    return {k: (torch.tensor(np.asarray(stats[k]["mean"], np.float32)), torch.tensor(np.asarray(stats[k]["std"], np.float32)))
            for k in ("observation.state", "action")}


def _stream(kind: str, source: str, train: list[int], seed: int):
    """Batches (image, state, action) for `kind`, epoch after epoch."""
    if kind == "dataloader":
        import torch
        from torch.utils.data import DataLoader, Subset

        from dali_stream.meta.dataset import DatasetMeta
        from dali_stream.tools.bench_baseline import LeRobotStyleDataset

        meta = DatasetMeta.open(source)
        dataset = LeRobotStyleDataset(meta, {})
        keep = set(train)
        indices = [i for i, e in enumerate(dataset.columns["episode_index"].tolist()) if e in keep]
        loader = DataLoader(Subset(dataset, indices), batch_size=64, shuffle=True, drop_last=True, num_workers=2,
                            generator=torch.Generator().manual_seed(seed), persistent_workers=True)
        while True:
            for b in loader:
                yield b[CAMERA], b["observation.state"], b["action"]
    from dali_stream import StreamLoader

    pool = 16 if kind == "pool16" else "all"
    with StreamLoader(source, batch_size=64, episode_pool_size=pool, episodes=train, seed=seed, device="cpu",
                      num_workers=2) as loader:
        while True:
            for b in loader:
                yield b[CAMERA], b["observation.state"], b["action"]


def _validate(model, source: str, val: list[int], norm) -> float:
    import torch

    from dali_stream import StreamLoader

    total, count = 0.0, 0
    with torch.no_grad(), StreamLoader(source, batch_size=256, episodes=val, shuffle=False, device="cpu",
                                       num_workers=2) as loader:
        for b in loader:
            pred = model([b[CAMERA]], (b["observation.state"] - norm["observation.state"][0]) / norm["observation.state"][1])
            target = (b["action"] - norm["action"][0]) / norm["action"][1]
            total += float(torch.nn.functional.mse_loss(pred, target, reduction="sum")) / target.shape[1]
            count += target.shape[0]
    return total / count


def train(kind: str, source: str, train_eps: list[int], val: list[int], steps: int, every: int, seed: int) -> dict:
    import torch

    from dali_stream.meta.dataset import DatasetMeta
    from dali_stream.tools.train import Policy

    meta = DatasetMeta.open(source)
    norm = _norm(meta)
    torch.manual_seed(seed)
    model = Policy.build(1, 6, 6)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    curve, losses = [], []
    batches = _stream(kind, source, train_eps, seed)
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        image, state, action = next(batches)
        pred = model([image], (state - norm["observation.state"][0]) / norm["observation.state"][1])
        loss = torch.nn.functional.mse_loss(pred, (action - norm["action"][0]) / norm["action"][1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step % every == 0:
            curve.append({"step": step, "train_loss_last": float(np.mean(losses[-every:])),
                          "val_loss": _validate(model, source, val, norm)})
            print(kind, curve[-1], flush=True)
    batches.close()
    return {"kind": kind, "curve": curve, "wall_s": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?", default=str(ROOT / ".demo/global-2000"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--eval-every", type=int, default=150)
    ap.add_argument("--seed", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/cpu-2core-global-shuffle/shuffle_training.json"))
    args = ap.parse_args()
    if not Path(args.dataset).exists():
        raise SystemExit(f"{args.dataset} does not exist: benchmarks/global_shuffle.py writes it")
    from dali_stream.meta.dataset import DatasetMeta

    episodes = [int(e) for e in DatasetMeta.open(args.dataset).episodes["episode_index"]]
    cut = int(len(episodes) * 0.9)
    train_eps, val = episodes[:cut], episodes[cut:]
    runs = [{**train(kind, args.dataset, train_eps, val, args.steps, args.eval_every, seed), "seed": seed}
            for seed in args.seed for kind in ("pool16", "global", "dataloader")]
    final = {kind: [r["curve"][-1]["val_loss"] for r in runs if r["kind"] == kind] for kind in ("pool16", "global",
                                                                                               "dataloader")}
    report = {"dataset": args.dataset, "steps": args.steps, "batch_size": 64, "seed": args.seed,
              "train_episodes": len(train_eps), "val_episodes": len(val), "host": platform.node(),
              "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
              "final_val_loss": {k: v[0] if len(v) == 1 else v for k, v in final.items()}, "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["final_val_loss"], indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
