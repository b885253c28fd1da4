"""What the recipes share: the command line, the sample data on first use, and a short streaming run."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Callable


def video_keys(source: str) -> tuple[float, list[str]]:
    from dali_stream.meta import DatasetMeta

    meta = DatasetMeta.open(source)
    return meta.fps, list(meta.video_keys)


def ensure_sample(path: str) -> str:
    """The bundled sample dataset at `path`, written on first use (only for the default location)."""
    root = Path(path)
    if not (root / "meta/info.json").exists():
        from dali_stream.tools.sample_data import write_sample

        print(f"writing the sample dataset to {root} ...")
        write_sample(root)
    return str(root)


def run(description: str, make_loader: Callable, argv=None) -> dict:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("dataset", nargs="?", default=".demo/sample", help="dataset root (default: the sample, written "
                   "there on first use)")
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--decode", default="auto", choices=("auto", "gpu", "cpu"))
    p.add_argument("--device", default=None, help="where batches land (default: cuda when available)")
    p.add_argument("--tolerance-s", type=float, default=1e-4,
                   help="largest gap between a queried timestamp and its frame (lerobot's seeds use 1e-3)")
    args = p.parse_args(argv)
    source = ensure_sample(args.dataset) if args.dataset == ".demo/sample" else args.dataset
    loader = make_loader(source, batch_size=args.batch_size, decode=args.decode, device=args.device,
                         tolerance_s=args.tolerance_s)
    t0, n, batch = time.perf_counter(), 0, None
    for batch in loader:
        n += 1
        if n >= args.batches:
            break
    elapsed = time.perf_counter() - t0
    shapes = {k: list(v.shape) for k, v in batch.items() if hasattr(v, "shape")}
    summary = {"batches": n, "samples_per_s": round(n * args.batch_size / elapsed, 1), "routes": loader.routes,
               "shapes": shapes}
    print(json.dumps(summary, indent=2))
    return summary
