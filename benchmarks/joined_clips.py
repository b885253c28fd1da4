"""DALI's video decoder on one camera's batches: one clip per sample against the batch's clips joined into a few
streams (`graph.joined`, the loader's `join_streams`), each checked by painted ids, timed per batch.

    python3 benchmarks/joined_clips.py DATASET [--batches 8] [--batch-size 32] [--streams 0,1,2,7]   (GPU: NVDEC)
    DEV=cpu KEY=observation.images.top python3 benchmarks/joined_clips.py DATASET   (VP9 on DALI's CPU decoder)
    KEY=... python3 benchmarks/joined_clips.py DATASET --check-torchcodec          (any codec, frames only)

DALI 2.4's `fn.decoders.video` creates a decoder for every sample (~8 ms on an H100, not spread by threads:
results/NVIDIA-H100-80GB-HBM3/). `--streams 0` feeds per-sample clips as `join_streams=0` does; N > 0 joins a
batch's clips into at most N streams (`join_inputs`) and decodes them with the graph's own `joined_decode`
(decoder on the lead slots, `permute_batch`, `sequence_rearrange`). Prints milliseconds per batch for each,
the streams opened per batch and the frames with other ids than planned (must be 0).
"""

import argparse
import os
import time

import numpy as np
from nvidia.dali import fn, pipeline_def, types

from dali_stream import StreamLoader
from dali_stream.graph.joined import JoinedInputs, join_inputs
from dali_stream.graph.pipeline import joined_decode
from dali_stream.tools.paint import read_ids

DEV = os.environ.get("DEV", "mixed")
PARTS = ("lead", "encoded", "frames", "source", "order")


def planned(loader, key: str, batches: int):
    """(segments, frame indices, painted ids wanted) per batch of the loader's own epoch-0 plans."""
    out = []
    for b in range(batches):
        plan = loader.batch_plan(0, b)
        rows = [loader.store.rows(int(p)) for p in plan.episodes]
        segs, idx = loader.builder.locate(plan, rows, key)
        want = [(int(loader.meta.episode_index(int(p))), int(f)) for p, f in zip(plan.episodes, plan.frames)]
        out.append((segs, idx, want))
    return out


def per_sample(segs, idx) -> JoinedInputs:
    """The per-sample route's inputs in the joined layout: every sample its own lead (`join_inputs` with one
    group per sample cuts exactly the per-sample clips)."""
    return join_inputs(segs, idx, len(segs))


def pipeline(batch_size: int, threads: int, feed):
    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None if DEV == "cpu" else 0,
                  prefetch_queue_depth=1, exec_dynamic=True, enable_conditionals=True)
    def graph():
        parts = fn.external_source(source=feed, num_outputs=5, batch=True, ndim=[0, 1, 1, 0, 1],
                                   dtype=[types.BOOL, types.UINT8, types.INT32, types.INT32, types.INT32])
        return joined_decode(*parts, "nvdec" if DEV != "cpu" else "dali-cpu")

    pipe = graph()
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
        inputs = [per_sample(s, i) if streams == 0 else join_inputs(s, i, streams) for s, i, _ in batches]
        opened = sum(j.streams for j in inputs) / len(inputs)
        if args.check_torchcodec:  # the streams through FFmpeg, for any codec, on any machine
            from dali_stream.decode.cpu import open_decoder

            wrong = 0
            for j, (_, _, want) in zip(inputs, batches):
                decoded = {s: open_decoder(j.encoded[s].tobytes()).get_frames_at(indices=j.frames[s].tolist())
                           .data.numpy() for s in range(len(j.lead)) if bool(j.lead[s])}
                got = [read_ids(decoded[int(src)][o][0]) for src, o in zip(j.source, j.order)]
                wrong += sum(g != w for g, w in zip(got, want))
            print(f"{key} ({codec}) streams={streams} ({opened:.1f} per batch) through torchcodec: {wrong} of "
                  f"{sum(len(w) for *_, w in batches)} frames with other ids", flush=True)
            continue
        feed_iter = iter(inputs)

        def feed():
            j = next(feed_iter)
            return [getattr(j, p) for p in PARTS]

        pipe = pipeline(args.batch_size, args.threads, feed)
        wrong, times = 0, []
        for n, (_, _, want) in enumerate(batches):
            t0 = time.perf_counter()
            (out,) = pipe.run()
            out = out.as_cpu() if DEV != "cpu" else out
            if n >= 2:
                times.append(time.perf_counter() - t0)
            wrong += sum(read_ids(np.asarray(out.at(s))[0]) != w for s, w in enumerate(want))
        del pipe
        ms = np.mean(times) * 1e3
        print(f"{key} ({codec}) streams={streams}: {ms:7.1f} ms per batch of {args.batch_size} ({ms / args.batch_size:.2f} "
              f"ms per sample), {opened:.1f} streams per batch, {wrong} of {len(want) * len(batches)} frames with "
              "other ids", flush=True)


if __name__ == "__main__":
    main()
