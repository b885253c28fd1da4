"""Where DALI's per-sample milliseconds go, with Python timers and CUDA events only (the GPU node had
ncu and compute-sanitizer, no nsys, strace or perf).

    python3 benchmarks/dali_sample_profile.py DATASET [--camera KEY] [--json OUT]   (DEV=cpu: DALI's CPU decoder)

Each number is one pipeline run's time split by what changes between runs, on one camera's per-sample clips
(`graph.clips.dali_input`, what the loader feeds `fn.decoders.video`):
- **graph**: the same pipeline with its decoder left out (external source and a copy of the encoded bytes):
  what a run costs before any decoding;
- **fixed per sample** and **per picture**: batches of 16 clips decoding k = 1, 2, 4, 8, 16 pictures each (the
  clip's first k frames), on one thread: the straight line through (k, ms per clip) has the per-sample cost that
  does not depend on the pictures (demuxer and parser made, decoder capabilities asked, the first packet's
  set-up) as its intercept and what each decoded picture adds (decode, map, colour conversion, the stream sync
  after it) as its slope;
- **bytes**: the same one-picture clips with 4x the bytes after them (whole segments instead of clips): what
  reading a longer stream adds to the fixed part;
- **threads**: one-picture batches of 64 on 1, 2, 4 and 7 threads: whether the per-sample part runs in parallel;
- **open engine**: the same clips' pictures through the open-decoder engine (nvdec-open on a GPU, cpu-open with
  DEV=cpu), decoders kept open, one thread: per-picture cost without DALI's per-sample work.
CUDA events around each run (on the GPU) give the device time the run spans; Python timers the wall time.
Results: benchmarks/results/<gpu>/dali-sample-profile.json (gpu-check's measurements).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

DEV = os.environ.get("DEV", "mixed")
PICTURES = (1, 2, 4, 8, 16)
BATCH = 16
RUNS = 6


def segments(loader, key: str) -> list:
    """Camera `key`'s segment of every episode of the loader's dataset, cut by a store of their own."""
    from dali_stream.decode.cpu import DecoderCache
    from dali_stream.fetch.store import EpisodeStore

    store = EpisodeStore(loader.catalog, loader.config.tolerance_s, 1 << 30, DecoderCache(1), 0)
    return [store.segment(p, key) for p in range(len(loader.meta.lengths))]


def clips(loader, key: str, pictures: int, count: int, whole: bool = False, seed: int = 0):
    """`count` (encoded, frames) inputs: per-sample clips of one camera starting at random frames, asking their
    first `pictures` frames (whole: the episode's whole segment from its first frame)."""
    from dali_stream.graph.clips import dali_input

    rng = np.random.default_rng(seed)
    segs = segments(loader, key)
    out = []
    while len(out) < count:
        seg = segs[int(rng.integers(len(segs)))]
        if len(seg.pts_s) < pictures + 1:
            continue
        if whole:
            out.append((np.frombuffer(seg.data, np.uint8), np.arange(pictures, dtype=np.int32)))
            continue
        first = int(rng.integers(0, len(seg.pts_s) - pictures))
        clip = dali_input(seg, np.arange(first, first + pictures))
        out.append((clip.data, clip.frames))
    return out


def timed_runs(inputs, batch: int, threads: int, decode: bool = True) -> dict[str, float]:
    """Wall and (GPU) device milliseconds per run of a pipeline decoding `inputs` `batch` at a time."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    batches = [inputs[i:i + batch] for i in range(0, len(inputs) - batch + 1, batch)]
    feed = iter(batches)
    gpu = DEV != "cpu"

    def source():
        b = next(feed)
        return [x[0] for x in b], [x[1] for x in b]

    pipe = Pipeline(batch_size=batch, num_threads=threads, device_id=0 if gpu else None, prefetch_queue_depth=1,
                    exec_dynamic=True)
    with pipe:
        enc, frames = fn.external_source(source=source, num_outputs=2, batch=True, dtype=[types.UINT8, types.INT32])
        if decode:
            out = fn.decoders.video(enc, frames=frames, device=DEV, pad_mode="none", affine=False) if gpu else \
                fn.decoders.video(enc, frames=frames, device="cpu", pad_mode="none")
            pipe.set_outputs(out)
        else:  # the bytes moved as the decoder would get them, and the frame lists, nothing decoded
            pipe.set_outputs(enc.gpu() if gpu else fn.copy(enc), fn.copy(frames))
    pipe.build()
    pipe.run()  # warm: libraries, the decoder cache
    wall, device = [], []
    if gpu:
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(len(batches) - 1):
        if gpu:
            start.record()
        t0 = time.perf_counter()
        pipe.run()
        if gpu:
            end.record()
            end.synchronize()
            device.append(start.elapsed_time(end))
        wall.append((time.perf_counter() - t0) * 1e3)
    del pipe
    return {"wall_ms": float(np.median(wall)), "device_ms": float(np.median(device)) if device else None}


def open_engine_ms(loader, key: str, pictures: int, count: int) -> float | None:
    """Milliseconds per picture through the open-decoder engine, one thread, decoders kept open."""
    from dali_stream.decode.route import CPU_OPEN, NVDEC_OPEN

    route = CPU_OPEN if DEV == "cpu" else NVDEC_OPEN
    engine = route.make_engine(1, None if DEV == "cpu" else 0, {})
    rng = np.random.default_rng(1)
    segs = segments(loader, key)
    parts = []
    while len(parts) < count:
        seg = segs[int(rng.integers(len(segs)))]
        if len(seg.pts_s) > pictures:
            first = int(rng.integers(0, len(seg.pts_s) - pictures))
            parts.append((seg, np.arange(first, first + pictures)))
    try:
        engine.decode(key, [parts[0][0]], [parts[0][1]])  # warm
        t0 = time.perf_counter()
        for seg, idx in parts:
            engine.decode(key, [seg], [idx])
        seconds = time.perf_counter() - t0
        return seconds * 1e3 / (count * pictures)
    finally:
        engine.close()


def profile(root: str, key: str | None) -> dict:
    from dali_stream import StreamLoader

    loader = StreamLoader(root, batch_size=4, decode="cpu", image_dtype="uint8", device="cpu")
    key = key or next(iter(loader.routes))
    n = BATCH * (RUNS + 2)
    out: dict = {"dataset": root, "camera": key, "device": DEV, "batch": BATCH}
    out["graph_ms_per_batch"] = timed_runs(clips(loader, key, 1, n), BATCH, 1, decode=False)
    points = {k: timed_runs(clips(loader, key, k, n), BATCH, 1) for k in PICTURES}
    out["pictures"] = points
    per_clip = np.array([points[k]["wall_ms"] / BATCH for k in PICTURES])
    slope, intercept = np.polyfit(np.array(PICTURES, float), per_clip, 1)
    graph = out["graph_ms_per_batch"]["wall_ms"] / BATCH
    out["fixed_ms_per_sample"] = float(intercept - graph)
    out["ms_per_picture"] = float(slope)
    whole = timed_runs(clips(loader, key, 1, n, whole=True), BATCH, 1)
    out["whole_segment_one_picture_ms_per_sample"] = whole["wall_ms"] / BATCH
    out["threads"] = {t: timed_runs(clips(loader, key, 1, 64 * 4, seed=t), 64, t)["wall_ms"] / 64
                      for t in (1, 2, 4, 7)}
    try:
        out["open_engine_ms_per_picture"] = open_engine_ms(loader, key, 8, 32)
    except Exception as exc:  # noqa: BLE001 - PyNvVideoCodec missing on this node: say why
        out["open_engine_ms_per_picture"] = f"not measured: {type(exc).__name__}: {exc}"
    loader.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--camera", default=None, help="camera key (default: the dataset's first)")
    parser.add_argument("--json", default=None, help="write the profile here too")
    args = parser.parse_args()
    result = profile(args.dataset, args.camera)
    print(f"{result['camera']} on {DEV}: graph {result['graph_ms_per_batch']['wall_ms'] / BATCH:.2f} ms/sample, "
          f"fixed {result['fixed_ms_per_sample']:.2f} ms/sample, {result['ms_per_picture']:.2f} ms/picture; "
          f"one picture from a whole segment {result['whole_segment_one_picture_ms_per_sample']:.2f} ms/sample; "
          f"one-picture ms/sample by threads {', '.join(f'{t}: {v:.2f}' for t, v in result['threads'].items())}; "
          f"open engine {result['open_engine_ms_per_picture']} ms/picture")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
