"""lerobot-style `image_transforms` in the loader's worker processes against the same transform in the iterating
thread, alternated side by side.

    .venv/bin/python benchmarks/image_transforms.py [DATASET] [--runs 3] [--batches 12]
        [--out benchmarks/results/cpu-2core-transforms/image_transforms.json]

DATASET defaults to the quick AV1 benchmark sample (.demo/bench-av1-quick: two 640x480 cameras, lerobot's settings).
The transform is `Jitter` below, what lerobot's default ImageTransforms do built from torch alone (torchvision
does not import beside this machine's CPU torch): brightness, contrast and saturation jitter, a hue-like rotation
of the colour axes and a random affine (rotation, translation, scale) through `grid_sample`, every parameter drawn
from torch's global RNG as torchvision's v2 transforms draw them. The same transform wrapped in a lambda cannot be
pickled and runs in the iterating thread (what every batch paid before): that is the comparison. Each run is a
child process: batch 16, 2 workers, float32 frames on the CPU, 3 warm-up batches then `--batches` timed. Both
variants yield the same pixels (tests/loader/test_loader.py checks it); here only their speed.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import alternate, spread, within_rounds, write_result  # noqa: E402


class Jitter:
    """ColorJitter(0.3, 0.3, 0.3, hue=0.05) + RandomAffine(5 degrees, 5 % shift, 0.95-1.05 scale), in torch."""

    def __call__(self, img):
        import torch
        import torch.nn.functional as F

        frames = img if img.ndim == 4 else img[None]
        b, c, s = (1 + 0.3 * (2 * torch.rand(3) - 1)).tolist()
        frames = (frames * b).clamp(0, 1)
        mean = frames.mean(dim=(-3, -2, -1), keepdim=True)
        frames = ((frames - mean) * c + mean).clamp(0, 1)
        grey = frames.mean(dim=-3, keepdim=True)
        frames = ((frames - grey) * s + grey).clamp(0, 1)
        angle = float(2 * math.pi * 0.05 * (2 * torch.rand(1) - 1))  # hue: rotate the chroma plane
        cos, sin = math.cos(angle), math.sin(angle)
        k = 1 / 3
        rot = torch.tensor([[cos + (1 - cos) * k, k * (1 - cos) - math.sqrt(k) * sin, k * (1 - cos) + math.sqrt(k) * sin],
                            [k * (1 - cos) + math.sqrt(k) * sin, cos + k * (1 - cos), k * (1 - cos) - math.sqrt(k) * sin],
                            [k * (1 - cos) - math.sqrt(k) * sin, k * (1 - cos) + math.sqrt(k) * sin, cos + k * (1 - cos)]])
        frames = torch.einsum("ij,tjhw->tihw", rot, frames).clamp(0, 1)
        theta = math.radians(5) * float(2 * torch.rand(1) - 1)
        scale = 1 + 0.05 * float(2 * torch.rand(1) - 1)
        shift = 0.05 * (2 * torch.rand(2) - 1)
        affine = torch.tensor([[math.cos(theta) / scale, -math.sin(theta) / scale, float(shift[0])],
                               [math.sin(theta) / scale, math.cos(theta) / scale, float(shift[1])]])
        grid = F.affine_grid(affine.expand(len(frames), 2, 3), list(frames.shape), align_corners=False)
        frames = F.grid_sample(frames, grid, align_corners=False)
        return frames if img.ndim == 4 else frames[0]


def _child(source: str, variant: str, batches: int, out) -> None:
    from benchmarks.image_transforms import Jitter as Importable  # a class the worker processes can import
    from dali_stream import StreamLoader

    transform = Importable() if variant == "processes" else (lambda img, j=Importable(): j(img))
    loader = StreamLoader(source, batch_size=16, device="cpu", num_workers=2, seed=0, image_transforms=transform)
    it = iter(loader)
    for _ in range(3):
        next(it)
    t, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(it)
    wall = time.perf_counter() - t
    out.put({"variant": variant, "in_processes": loader.stats()["transforms"]["in_processes"],
             "samples_per_s": batches * 16 / wall, "caller_cpu_ms_per_sample": 1e3 * (time.process_time() - cpu)
             / (batches * 16)})
    loader.close()


def run(source: str, variant: str, batches: int) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(source, variant, batches, out))
    proc.start()
    got = out.get(timeout=1800)
    proc.join()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", nargs="?", default=str(ROOT / ".demo/bench-av1-quick"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/cpu-2core-transforms/image_transforms.json"))
    args = ap.parse_args()
    if not (Path(args.dataset) / "meta/info.json").exists():
        from dali_stream.tools.bench_samples import bench_sample_spec
        from dali_stream.tools.sample_data import write_sample

        write_sample(Path(args.dataset), bench_sample_spec("av1-quick"))
    got = alternate(("thread", "processes"), args.runs, lambda v: run(args.dataset, v, args.batches))
    rates = {v: spread(r["samples_per_s"] for r in runs) for v, runs in got.items()}
    ratio = within_rounds(got["processes"], got["thread"], "samples_per_s")
    summary = {"dataset": args.dataset, "runs": [r for pair in zip(*got.values()) for r in pair],
               "machine": platform.platform(), "cpu_cores": len(__import__("os").sched_getaffinity(0)),
               "date": time.strftime("%Y-%m-%d"),
               "samples_per_s_median": {v: s["median"] for v, s in rates.items()},
               "samples_per_s_range": {v: s["range"] for v, s in rates.items()},
               "processes_over_thread_median": ratio["median"], "processes_over_thread_range": ratio["range"]}
    write_result(args.out, summary)
    print(json.dumps({k: summary[k] for k in ("samples_per_s_median", "processes_over_thread_median",
                                              "processes_over_thread_range")}))


if __name__ == "__main__":
    main()
