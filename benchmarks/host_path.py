"""The host path with nothing to decode: every frame from the decoded-frame cache, batches on the CPU, one process.
Once NVDEC or the cache takes decoding off the CPU, this is the whole loader: planning, locating, the cache's
lookups, laying frames out, tables, hand-off.

    .venv/bin/python benchmarks/host_path.py [--rounds 3] [--epochs 4] [--rev REV] [--image-dtype uint8] [--out FILE]

Two datasets, written by the project's sample writer in lerobot's recorder mode if missing: the README's sample
shape (three 96x128 cameras: H.264, AV1, VP9; `.demo/host-path-sample`) and a LIBERO-shaped one (two 256x256 AV1
cameras, 10 fps; `.demo/host-path-libero`). Each run is a process of its own: a loader with uint8 images (or
`--image-dtype float32`, lerobot's: the layout's cast and division then bind), batch 64,
`frame_cache_bytes` 2 GiB and the default 2 workers draws epoch 1 (decoding, filling the cache) and epoch 2 (what
epoch 1's dropped last batch left), then `--epochs` epochs are timed, every frame from the cache. Both memory
formats. With `--rev`, the same runs of an earlier commit (checked out with `git worktree`) alternate with the
working tree's, round by round; the ratio is taken within each round.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _common import alternate, child, earlier_tree, spread, within_rounds, write_result

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {  # name -> (folder, sample writer arguments)
    "sample-96x128": (".demo/host-path-sample", dict(seed=1)),  # the README sample's shape (seed 0: one AV1 frame
    # of lerobot's recorder at crf 30 loses its painted ids, which the writer refuses)
    "libero-256x256": (".demo/host-path-libero", dict(episodes=40, min_length=60, max_length=120, height=256,
                                                      width=256, fps=10, content="scene",
                                                      cameras="image:av1,wrist_image:av1")),
}

CHILD = r"""
import sys, time
t0 = time.perf_counter()
from dali_stream import StreamLoader
ds, memory_format, epochs, image_dtype = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
loader = StreamLoader(ds, batch_size=64, device="cpu", image_dtype=image_dtype, memory_format=memory_format,
                      frame_cache_bytes=2 << 30, seed=1, drop_last=True)
start_s = time.perf_counter() - t0
for _ in range(2):  # epoch 1 decodes and fills the cache; epoch 2 what epoch 1's dropped batch left
    for batch in loader:
        pass
decoded = loader.stats()["build"]["decoded_frames"]
t0, n = time.perf_counter(), 0
for _ in range(epochs):
    for batch in loader:
        n += len(batch["index"])
seconds = time.perf_counter() - t0
assert loader.stats()["build"]["decoded_frames"] == decoded, "a timed epoch decoded frames: not every frame was held"
RESULT = {"samples_per_s": n / seconds, "samples": n, "import_and_construct_s": start_s}
loader.close()
"""


def dataset(name: str) -> str:
    """The shape's dataset folder, written first if missing."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    folder, spec = SHAPES[name]
    path = ROOT / folder
    if not (path / "meta/info.json").exists():
        if "cameras" in spec:
            spec = dict(spec, cameras=parse_cameras(spec["cameras"]))
        write_sample(path, SampleSpec(recorder="lerobot", **spec))
    return str(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=4, help="timed epochs per run, after two untimed")
    ap.add_argument("--rev", default=None, help="an earlier commit, run alternately with the working tree")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)}")
    ap.add_argument("--image-dtype", default="uint8", choices=("uint8", "float32"))
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-host-path/host_path.json")
    args = ap.parse_args(argv)
    shapes = args.shapes.split(",")
    paths = {s: dataset(s) for s in shapes}
    with earlier_tree(args.rev, ROOT) as before:
        trees = {"after": ROOT, **({"before": before} if before is not None else {})}
        configs = [(tree, shape, fmt) for shape in shapes for fmt in ("contiguous", "channels_last")
                   for tree in trees]
        got = alternate(configs, args.rounds, lambda c: child(  # the tree its working folder: its dali_stream
            CHILD, paths[c[1]], c[2], str(args.epochs), args.image_dtype, cwd=trees[c[0]]))
    summary = {}
    for tree, shape, fmt in configs:
        summary[f"{tree} {shape} {fmt}"] = {"samples_per_s": spread(r["samples_per_s"] for r in got[(tree, shape, fmt)]),
                                            "import_and_construct_s": spread(
                                                r["import_and_construct_s"] for r in got[(tree, shape, fmt)])}
        if tree == "after" and "before" in trees:
            summary[f"after/before {shape} {fmt}"] = within_rounds(got[(tree, shape, fmt)],
                                                                   got[("before", shape, fmt)], "samples_per_s")
    result = {"command": "python benchmarks/host_path.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "rev": args.rev, "rounds": args.rounds, "epochs": args.epochs, "image_dtype": args.image_dtype,
              "summary": summary,
              "runs": {" ".join(c): got[c] for c in configs}}
    print(write_result(args.out, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
