"""Does DALI's decode cost grow with a frame's depth in its episode? Whole segments vs per-sample clips.

One VP9 episode of 1800 frames (GOP 30, 320x240, the sample writer's painted frames) through DALI's CPU
decoder (`fn.decoders.video(device="cpu")`, the `dali-cpu` route), batches of 4 samples, one frame each at
a given depth: fed the whole episode segment (what the loader did before clips) or the sample's clip
(`dali_stream.graph.clips`, what it does now). Each batch is timed warm, `--repeat` times, every (depth, feed) once
a round, `--rounds` rounds back to back (`_common.alternate`); the ratio deep/shallow within a round, median and
range, is the claim: flat with clips.

    .venv/bin/python benchmarks/dali_clip_depth.py [--rounds 3]
        [--out benchmarks/results/cpu-2core-480p/dali_clip_depth.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
from _common import alternate, ms_per, spread, within_rounds, write_result

DEPTHS = (1, 300, 900, 1500, 1790)


def _segment(root: Path):
    from dali_stream.fetch.segments import cut_segment
    from dali_stream.meta.dataset import DatasetMeta

    meta = DatasetMeta.open(str(root))
    key = meta.video_keys[0]
    cam = meta.cameras[key]
    start = float(cam.from_timestamp[0])
    return meta, cut_segment(meta.data_fs, meta.video_file(0, key), start, float(cam.to_timestamp[0]), episode=0,
                             camera=key, codec=cam.codec, tolerance_s=1e-4,
                             last_frame_s=start + (int(meta.lengths[0]) - 1) / meta.fps)


def _pipeline(feed, batch: int):
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    from dali_stream.decode.route import DALI_CPU
    from dali_stream.graph.pipeline import video_decoder

    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=None, prefetch_queue_depth=1)
    with pipe:
        enc, idx = fn.external_source(source=feed, num_outputs=2, batch=True, dtype=[types.UINT8, types.INT32])
        pipe.set_outputs(video_decoder(enc, idx, DALI_CPU))
    pipe.build()
    return pipe


def _feed(data: list, frames: list):
    """DALI's source: the same batch every run (a callable of no arguments)."""
    return lambda: (data, frames)


def main() -> None:
    from dali_stream.graph.clips import dali_input
    from dali_stream.tools.paint import read_ids
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default=".demo/clip-depth-vp9")
    p.add_argument("--out", default="benchmarks/results/cpu-2core-480p/dali_clip_depth.json")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    root = Path(args.dataset)
    if not (root / "meta/info.json").exists():
        print(f"writing {root} (one 1800-frame VP9 episode) ...")
        write_sample(root, SampleSpec(episodes=1, min_length=1800, max_length=1800, height=240, width=320, gop=30,
                                      cameras=parse_cameras("top:vp9"), seed=0), overwrite=True)
    meta, seg = _segment(root)
    start = float(meta.cameras[meta.video_keys[0]].from_timestamp[0])
    feeds = {}  # (mode, depth) -> (pipeline, frames fed, bytes fed)
    for depth in DEPTHS:
        idx = seg.frame_indices([start + depth / meta.fps], 1e-4, "bench")
        for mode in ("segment", "clip"):
            if mode == "segment":
                data, frames, fed = np.frombuffer(seg.data, np.uint8), idx.astype(np.int32), int(idx[0]) + 1
            else:
                d = dali_input(seg, idx)
                data, frames, fed = d.data, d.frames, d.frames_fed
            pipe = _pipeline(_feed([data] * args.batch, [frames] * args.batch), args.batch)
            (out,) = pipe.run()  # warm-up
            assert read_ids(np.asarray(out.at(0))[0]) == (0, depth), (mode, depth)
            feeds[(mode, depth)] = pipe, fed, int(data.nbytes)

    got = alternate(list(feeds), args.rounds, lambda way: ms_per(feeds[way][0].run, args.batch, args.repeat),
                    say=lambda _: None)
    rows = []
    for (mode, depth), (_, fed, nbytes) in feeds.items():
        ms = spread(r["ms"] for r in got[(mode, depth)])
        rows.append({"depth": depth, "mode": mode, "ms_per_sample": ms, "frames_fed": fed, "bytes_fed": nbytes})
        print(f"depth {depth:5d} {mode:8s} {ms['median']:8.2f} ms/sample  frames fed {fed:5d}  bytes {nbytes}")
    result = {"what": __doc__.splitlines()[0], "dataset": "1 VP9 episode, 1800 frames, GOP 30, 320x240",
              "route": "dali-cpu", "batch": args.batch, "repeat": args.repeat, "rounds": args.rounds, "rows": rows,
              "deep_over_shallow": {mode: within_rounds(got[(mode, DEPTHS[-1])], got[(mode, DEPTHS[0])],
                                                        "ms") for mode in ("segment", "clip")},
              "machine": f"{platform.processor() or platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
              "date": time.strftime("%Y-%m-%d")}
    write_result(args.out, result)
    print(json.dumps(result["deep_over_shallow"]))


if __name__ == "__main__":
    main()
