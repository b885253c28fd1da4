"""VP9 cameras off NVDEC: DALI's CPU decoder against torchcodec, over whole epochs of the loader, small and large frames.

    .venv/bin/python benchmarks/vp9_route.py [--rounds 3] [--shapes vp9-96x128,vp9-640x480] [--out FILE]

What `decode="auto"` takes for a VP8/VP9 camera no NVDEC decodes is settled here. The datasets are written by the
project's sample writer if missing (two VP9 cameras, GOP 2, `--content scene`, crf 30): 40 episodes of 120-200 frames
at 96x128, and the 480p sample `results/cpu-2core-frame-cache/`'s VP9 runs used (5 episodes, 640x480). Each run is a
process of its own (`_common.child`), one whole epoch of `StreamLoader` with its defaults on the CPU (batch 16,
float32 images, a pool of 16 episodes, 2 workers), the cameras on:

- `dali-cpu`: DALI's CPU decoder (`decode="dali-cpu"`: in the graph, or on the workers decoding each open episode's
  segment whole);
- `cpu`: torchcodec (`decode="cpu"`, FFmpeg's own VP9 decoder: lerobot's frames bit for bit).

The two alternated round by round; samples/s over the epoch from the first batch asked (`epoch`) and from before
`import torch` (`with_start`), their ratios within each round; peak RSS.
"""

from __future__ import annotations

import argparse
import sys

from _common import alternate, child, spread, write_result
from host_path import ROOT

SHAPES = {  # name -> (folder, sample writer arguments)
    "vp9-96x128": (".demo/bench-vp9-96x128", dict(episodes=40, min_length=120, max_length=200, height=96, width=128,
                                                    episodes_per_file=10)),
    "vp9-640x480": (".demo/bench-vp9-quick", dict(episodes=5, min_length=120, max_length=200, height=480, width=640,
                                                    episodes_per_file=5)),
}
ROUTES = ("dali-cpu", "cpu")

LOADER = r"""
import sys, time
t0 = time.perf_counter()
import torch
from dali_stream import StreamLoader
ds, decode = sys.argv[1], sys.argv[2]
loader = StreamLoader(ds, device="cpu", seed=1, decode=decode)
t1, n = time.perf_counter(), 0
for batch in loader:
    n += len(batch["index"])
t2 = time.perf_counter()
RESULT = {"samples": n, "with_start": n / (t2 - t0), "epoch": n / (t2 - t1), "routes": sorted(set(loader.routes.values()))}
loader.close()
"""


def dataset(name: str) -> str:
    """The shape's dataset folder, written first if missing."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    folder, spec = SHAPES[name]
    path = ROOT / folder
    if not (path / "meta/info.json").exists():
        write_sample(path, SampleSpec(**spec, cameras=parse_cameras("front:vp9,wrist:vp9"), gop=2, content="scene",
                                      crf=30, seed=7))
    return str(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)}")
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-vp9/vp9_route.json")
    args = ap.parse_args(argv)
    shapes = args.shapes.split(",")
    paths = {s: dataset(s) for s in shapes}
    configs = [(shape, decode) for shape in shapes for decode in ROUTES]
    got = alternate(configs, args.rounds, lambda c: child(LOADER, paths[c[0]], c[1], cwd=ROOT))
    summary = {}
    for shape in shapes:
        runs = {decode: got[(shape, decode)] for decode in ROUTES}
        part = {f"{decode} {m}": spread(r[m] for r in runs[decode]) for decode in ROUTES
                for m in ("epoch", "with_start", "peak_rss_mb")}
        for m in ("epoch", "with_start"):  # ratios within each round
            part[f"cpu / dali-cpu {m}"] = spread(c[m] / d[m] for c, d in zip(runs["cpu"], runs["dali-cpu"]))
        summary[shape] = part
    command = "python benchmarks/vp9_route.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(write_result(args.out, {"command": command, "rounds": args.rounds, "summary": summary,
                                  "runs": {" ".join(c): got[c] for c in configs}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
