"""What the recipes share: the command line, the sample data on first use, and a short streaming run."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Callable

from dali_stream.tools.flags import add_loader_flags, loader_settings
from dali_stream.tools.sources import video_keys  # noqa: F401 - what the recipes import from here

# Loader settings every recipe takes as flags (type, default and help from dali_stream.LoaderConfig).
RECIPE_SETTINGS = ("batch_size", "decode", "device", "tolerance_s", "num_workers", "episode_pool_size",
                   "memory_format")


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
    add_loader_flags(p, RECIPE_SETTINGS, batch_size=8)
    args = p.parse_args(argv)
    source = ensure_sample(args.dataset) if args.dataset == ".demo/sample" else args.dataset
    loader = make_loader(source, **loader_settings(args, RECIPE_SETTINGS))
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
