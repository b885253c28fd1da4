"""Which loader returns a frame other than its plan when an NVDEC loader and a torchcodec loader share a process.

    python3 benchmarks/gpu_two_loaders.py [--both | --cpu-alone]      (on a GPU node; LOCAL=1: VP9 on DALI's CPU)

The dataset and loaders of tests/gpu/test_gpu.py::test_nvdec_and_torchcodec_give_the_same_frames_per_camera
(192x160, GOP 16, H.264/HEVC/AV1/VP9; batch 4, pool 3, seed 5). Default: the NVDEC loader in four settings
(three NVDEC cameras or HEVC alone, with or without the torchcodec loader iterated beside it), checking camera
side (HEVC) against the plan; for a mismatch, that batch's DALI inputs decoded again, alone and together.
--both: both loaders zipped, each checked against its own plan. --cpu-alone: the torchcodec loader alone.
Results: benchmarks/results/<gpu>/two-loaders.txt.
"""

import os
import sys

import numpy as np
from _common import gpu_test_dataset

from dali_stream import StreamLoader
from dali_stream.decode.route import DALI_CPU, NVDEC
from dali_stream.graph.pipeline import decode_once
from dali_stream.tools.paint import UnreadableIds, read_ids

LOCAL = os.environ.get("LOCAL") == "1"
p = gpu_test_dataset()
FPS = 30
FRONT, SIDE, WRIST, TOP = (f"observation.images.{n}" for n in ("front", "side", "wrist", "top"))
DELTAS = {FRONT: [-1 / FPS, 0.0, 2 / FPS], TOP: [-2 / FPS, 0.0], "action": [0.0, 1 / FPS]}
args = dict(batch_size=4, episode_pool_size=3, seed=5, delta_timestamps=DELTAS, image_dtype="uint8")
G = "cpu" if LOCAL else "gpu"
CK = TOP if LOCAL else SIDE  # the camera checked (LOCAL: the one DALI decodes on a CPU machine)


def ids(img):
    try:
        return read_ids(img)
    except UnreadableIds:
        return "?"


def mismatches(batch, key):
    """(painted, planned) for each sample of `batch` whose camera `key` frame is not the planned one."""
    eps, frs = batch["episode_index"].cpu().numpy(), batch["frame_index"].cpu().numpy()
    x = batch[key].cpu().numpy()
    x = x[:, -1] if x.ndim == 5 else x
    return [(ids(x[j]), (int(eps[j]), int(frs[j]))) for j in range(len(eps)) if ids(x[j]) != (int(eps[j]), int(frs[j]))]


def redecode(slot, prepared):
    """Decode one batch's DALI inputs for camera CK again (`slot`: the batch's output name -> its place): each sample
    alone, then the four together."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    enc, fr = prepared.arrays[slot[f"{CK}@encoded"]], prepared.arrays[slot[f"{CK}@frames"]]
    print("  batch", prepared.plan.index, "episodes", prepared.plan.episodes.tolist(), "frames",
          prepared.plan.frames.tolist(), "clip bytes", [len(e) for e in enc], "indices", [f.tolist() for f in fr])
    for k in range(len(enc)):
        one = decode_once(enc[k].tobytes(), fr[k].tolist(), DALI_CPU if LOCAL else NVDEC)
        print("   sample", k, "alone ->", [ids(im) for im in one], flush=True)
    pipe = Pipeline(batch_size=len(enc), num_threads=7, device_id=None if LOCAL else 0, prefetch_queue_depth=1)
    with pipe:
        e, f = fn.external_source(source=lambda: (list(enc), list(fr)), num_outputs=2, batch=True,
                                  dtype=[types.UINT8, types.INT32])
        pipe.set_outputs(fn.decoders.video(e, frames=f, device="cpu" if LOCAL else "mixed", pad_mode="none"))
    pipe.build()
    (o,) = pipe.run()
    o = o if LOCAL else o.as_cpu()
    print("   together ->", [[ids(im) for im in np.asarray(o.at(k))] for k in range(len(enc))], flush=True)


def run(label, with_cpu, gpu_keys, nb=6):
    from dali_stream.graph.batches import BatchBuilder

    kept = {}  # batch -> (its DALI inputs of CK, where each output is), as the NVDEC loader's builder made them
    build = BatchBuilder.build

    def keep(builder, plan):  # every builder's: only the one that feeds DALI clips of CK keeps them
        out = build(builder, plan)
        if f"{CK}@encoded" in builder._slot:
            kept[plan.index] = (builder._slot, out)
        return out

    BatchBuilder.build = keep
    try:
        gpu = StreamLoader(str(p), decode={k: G for k in gpu_keys}, **args)
        it_cpu = iter(StreamLoader(str(p), decode="cpu", **args)) if with_cpu else None
        bad = []
        for n, a in enumerate(gpu):
            if it_cpu is not None:
                next(it_cpu)
            bad += [(n, w) for w in mismatches(a, CK)]
            if n == nb:
                break
    finally:
        BatchBuilder.build = build
    print(label, "routes", {k.rsplit(".", 1)[-1]: v for k, v in gpu.routes.items()}, "bad", bad, flush=True)
    for n, _ in bad[:2]:
        if n in kept:
            redecode(*kept[n])


if "--both" in sys.argv:
    gpu_loader = StreamLoader(str(p), decode={k: G for k in (FRONT, SIDE, TOP)}, **args)
    cpu_loader = StreamLoader(str(p), decode="cpu", **args)
    for n, (g, c) in enumerate(zip(gpu_loader, cpu_loader)):
        print(n, "gpu", mismatches(g, CK))
        print(n, "cpu", mismatches(c, CK), flush=True)
        if n == 6:
            break
elif "--cpu-alone" in sys.argv:
    for n, c in enumerate(StreamLoader(str(p), decode="cpu", **args)):
        print(n, mismatches(c, CK), flush=True)
        if n == 6:
            break
else:
    run("A gpu(front,side,top)+cpu loader", True, (FRONT, SIDE, TOP))
    run("B gpu(front,side,top) alone", False, (FRONT, SIDE, TOP))
    run("C gpu(side) alone", False, (SIDE,))
    run("D gpu(side)+cpu loader", True, (SIDE,))
