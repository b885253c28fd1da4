"""DALI's video decoder on one camera's batches: one clip per sample against the batch in groups, each group's
clips joined into one stream (`graph.joined`, the loader's `join_streams`), checked by painted ids, timed per batch.

    python3 benchmarks/joined_clips.py DATASET [--batches 8] [--batch-size 32] [--streams 0,1,2,7]   (GPU: NVDEC)
    DEV=cpu KEY=observation.images.top python3 benchmarks/joined_clips.py DATASET   (VP9 on DALI's CPU decoder)
    KEY=... python3 benchmarks/joined_clips.py DATASET --check-torchcodec          (any codec, frames only)

DALI 2.4's `fn.decoders.video` creates a decoder for every sample (~8 ms on an H100, not spread by threads:
results/NVIDIA-H100-80GB-HBM3/). `--streams 0` feeds per-sample clips as `join_streams=0` does; N > 0 decodes
the batch as at most N groups (`group_sizes`), one joined stream each, laid out member by member by
`sequence_rearrange` as the loader's graph does. Prints milliseconds per batch for each, the streams per batch
and the frames with other ids than planned (must be 0).
"""

import argparse
import os
import time

import numpy as np
from nvidia.dali import fn, types
from nvidia.dali.pipeline import Pipeline

from dali_stream import StreamLoader
from dali_stream.decode.route import DALI_CPU, NVDEC
from dali_stream.graph.clips import dali_input
from dali_stream.graph.joined import group_sizes, join_group
from dali_stream.graph.pipeline import video_decoder
from dali_stream.tools.paint import read_ids

DEV = os.environ.get("DEV", "mixed")


def planned(loader, key: str, batches: int):
    """(segments, frame indices, painted ids wanted) per batch of the loader's own epoch-0 plans."""
    out = []
    for b in range(batches):
        plan = loader.batch_plan(0, b)
        segs, idx = loader.locate(plan, key)
        want = [(int(loader.meta.episode_index(int(p))), int(f)) for p, f in zip(plan.episodes, plan.frames)]
        out.append((segs, idx, want))
    return out


def streams_of(segs, idx, streams: int):
    """The batch's DALI inputs: a clip per sample (`streams` 0), or one joined stream per group."""
    if streams == 0:
        return [dali_input(s, i) for s, i in zip(segs, idx)]
    n = group_sizes(len(segs), streams)
    joined = [join_group(segs[g:g + n], idx[g:g + n]) for g in range(0, len(segs), n)]
    if any(j is None for j in joined):
        raise SystemExit("some group's clips cannot share a stream (other codec configurations): the loader would "
                         "decode this batch one clip per sample")
    return joined


def pipeline(batch_size: int, threads: int, feed):
    pipe = Pipeline(batch_size=batch_size, num_threads=threads, device_id=None if DEV == "cpu" else 0,
                    prefetch_queue_depth=1, exec_dynamic=True)
    with pipe:
        enc, frames, order = fn.external_source(source=feed, num_outputs=3, batch=True,
                                                dtype=[types.UINT8, types.INT32, types.INT32])
        video = video_decoder(enc, frames, NVDEC if DEV != "cpu" else DALI_CPU)
        pipe.set_outputs(fn.sequence_rearrange(video, new_order=order))
    pipe.build()
    return pipe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=7)
    ap.add_argument("--streams", default="0,1,2,7", help="comma-separated join_streams values; 0: per-sample clips")
    ap.add_argument("--check-torchcodec", action="store_true", help="only check the joined streams' frames with "
                    "torchcodec (no DALI decode, no timing): any codec on a CPU machine")
    args = ap.parse_args()
    key = os.environ.get("KEY", "observation.images.front")
    loader = StreamLoader(args.dataset, batch_size=args.batch_size, decode="cpu", image_dtype="uint8", device="cpu")
    batches = planned(loader, key, min(args.batches + 2, len(loader)))  # two warm-up batches
    codec = loader.meta.cameras[key].codec
    for streams in (int(s) for s in args.streams.split(",")):
        inputs = [streams_of(s, i, streams) for s, i, _ in batches]
        opened = sum(map(len, inputs)) / len(inputs)
        if args.check_torchcodec:  # the streams through FFmpeg, for any codec, on any machine
            from dali_stream.decode.cpu import open_decoder

            wrong = 0
            for groups, (_, _, want) in zip(inputs, batches):
                images = np.concatenate([open_decoder(d.data.tobytes()).get_frames_at(indices=d.frames.tolist())
                                         .data.numpy()[d.order] for d in groups])
                wrong += sum(read_ids(img) != w for img, w in zip(images, want))
            print(f"{key} ({codec}) streams={streams} ({opened:.1f} per batch) through torchcodec: {wrong} of "
                  f"{sum(len(w) for *_, w in batches)} frames with other ids", flush=True)
            continue
        feed_iter = iter(inputs)

        def feed():
            groups = next(feed_iter)
            return [d.data for d in groups], [d.frames for d in groups], [d.order for d in groups]

        pipe = pipeline(max(map(len, inputs)), args.threads, feed)
        wrong, times = 0, []
        for n, (_, _, want) in enumerate(batches):
            t0 = time.perf_counter()
            (out,) = pipe.run()
            out = out.as_cpu() if DEV != "cpu" else out
            if n >= 2:
                times.append(time.perf_counter() - t0)
            images = np.concatenate([np.asarray(out.at(g)) for g in range(len(out))])
            wrong += sum(read_ids(img) != w for img, w in zip(images, want))
        del pipe
        ms = np.mean(times) * 1e3
        print(f"{key} ({codec}) streams={streams}: {ms:7.1f} ms per batch of {args.batch_size} ({ms / args.batch_size:.2f} "
              f"ms per sample), {opened:.1f} streams per batch, {wrong} of {len(want) * len(batches)} frames with "
              "other ids", flush=True)


if __name__ == "__main__":
    main()
