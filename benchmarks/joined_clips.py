"""One DALI sample per batch and camera instead of one per sample: the batch's clips joined into one stream.

    python3 benchmarks/joined_clips.py DATASET [--batches 8] [--batch-size 32]     (GPU node: NVDEC)
    DEV=cpu KEY=observation.images.top python3 benchmarks/joined_clips.py DATASET   (VP9 on DALI's CPU decoder)
    KEY=... python3 benchmarks/joined_clips.py DATASET --check-torchcodec          (any codec, frames only)

DALI 2.4's `fn.decoders.video` creates a decoder for every sample (~8 ms on an H100, not spread by threads:
results/NVIDIA-H100-80GB-HBM3/). Here the one-frame clips of a batch (`graph.clips`: keyframe at or before the
frame, through the frame) are written as ONE MP4 by `fetch.mp4write` — each clip shifted in time after the
previous one; their files' `stsd` boxes differ only in `btrt` bitrates, so the first one serves (clips
whose codec configuration differs would need a stream of their own) —
and decoded as one DALI sample at the clips' frame offsets. Checks every frame's painted ids in both modes,
then prints milliseconds per batch: per-sample clips (as the loader does today) against the joined stream.
"""

import argparse
import os
import time

import numpy as np
from nvidia.dali import fn, types
from nvidia.dali.pipeline import Pipeline

from dali_stream import StreamLoader
from dali_stream.fetch.mp4write import write_mp4
from dali_stream.fetch.segments import samples_bytes
from dali_stream.graph.clips import clip_span, dali_input
from dali_stream.tools.paint import read_ids

DEV = os.environ.get("DEV", "mixed")


def codec_config(stsd: bytes) -> bytes:
    """The `stsd` without its `btrt` box's bitrates, which differ from file to file of one camera (each file's
    own average): what must match for clips of two files to share a stream."""
    at = stsd.find(b"btrt")
    return stsd if at < 0 else stsd[:at + 4] + bytes(12) + stsd[at + 16:]


def joined(parts):
    """(stsd, timescale, sizes, dts, pts, durations, keys, payload, frame) per clip -> (mp4 bytes, frame indices)."""
    stsd, timescale = parts[0][0], parts[0][1]
    same = all(codec_config(p[0]) == codec_config(stsd) and p[1] == timescale for p in parts)
    assert same, "clips whose codec configuration differs need a stream each"
    cols = {k: [] for k in ("sizes", "dts", "pts", "dur", "keys")}
    payload, frames, end, shown = [], [], 0, 0
    for _, _, sizes, dts, pts, dur, keys, data, frame in parts:
        shift = end - int(min(dts.min(), pts.min()))
        cols["sizes"].append(sizes)
        cols["dts"].append(dts + shift)
        cols["pts"].append(pts + shift)
        cols["dur"].append(dur)
        cols["keys"].append(keys)
        payload.append(data)
        frames.append(shown + frame)  # presentation order: every frame of the earlier clips comes first
        shown += len(pts)
        end = int(max((pts + shift + dur).max(), (dts + shift + dur).max()))
    c = {k: np.concatenate(v) for k, v in cols.items()}
    return write_mp4(stsd, timescale, c["sizes"], c["dts"], c["pts"], c["dur"], c["keys"], b"".join(payload)), frames


def clip_parts(seg, f):
    index = seg.packets()
    shown = np.sort(index.pts)
    start, stop = clip_span(index, int(shown[f]), int(shown[f]))
    part = slice(start, stop)
    frame = int(np.searchsorted(np.sort(index.pts[part]), shown[f]))
    return (index.stsd, index.time_base.denominator, index.size[part], index.dts[part], index.pts[part],
            index.duration[part], index.key[part], samples_bytes(seg.data, 0, index.pos[part], index.size[part]), frame)


def _feeder(it):
    def feed():
        b = next(it)
        return [x[0] for x in b], [x[1] for x in b]
    return feed


def pipeline(batch_size, threads, feed):
    pipe = Pipeline(batch_size=batch_size, num_threads=threads, device_id=None if DEV == "cpu" else 0,
                    prefetch_queue_depth=1, exec_dynamic=True)
    with pipe:
        e, fr = fn.external_source(source=feed, num_outputs=2, batch=True, dtype=[types.UINT8, types.INT32])
        pipe.set_outputs(fn.decoders.video(e, frames=fr, device=DEV, pad_mode="none"))
    pipe.build()
    return pipe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=7)
    ap.add_argument("--check-torchcodec", action="store_true", help="only check the joined streams' frames with "
                    "torchcodec (no DALI decode, no timing): any codec on a CPU machine")
    args = ap.parse_args()
    key = os.environ.get("KEY", "observation.images.front")
    loader = StreamLoader(args.dataset, batch_size=4, decode="cpu", image_dtype="uint8", device="cpu")
    store, meta = loader.builder.store, loader.meta
    rng = np.random.default_rng(0)
    bs, nb = args.batch_size, args.batches + 2  # two warm-up batches
    batches = []
    for _ in range(nb):
        batch = []
        for _ in range(bs):
            pos = int(rng.integers(meta.num_episodes))
            seg = store.segment(pos, key)
            rows = store.rows(pos)
            f = int(rng.integers(int(meta.lengths[pos])))
            q = float(meta.cameras[key].from_timestamp[pos]) + float(rows["timestamp"][f])
            idx = int(seg.frame_indices(np.array([q]), 1e-4, "frame")[0])
            batch.append(((int(meta.episode_index(pos)), f), seg, idx))
        batches.append(batch)

    joins = [joined([clip_parts(seg, i) for _, seg, i in b]) for b in batches]
    if args.check_torchcodec:  # the joined streams through FFmpeg, for any codec, on any machine
        from dali_stream.decode.cpu import open_decoder

        wrong = 0
        for b, (data, frames) in zip(batches, joins):
            got = open_decoder(data).get_frames_at(indices=[int(f) for f in frames]).data.numpy()
            wrong += sum(read_ids(img) != want for img, (want, _, _) in zip(got, b))
        print(f"{key} ({meta.cameras[key].codec}) joined streams through torchcodec: {wrong} of {bs * nb} frames "
              "with other ids", flush=True)
        return
    per_sample = [[(d.data, d.frames) for d in (dali_input(seg, np.array([i])) for _, seg, i in b)] for b in batches]
    results = {}
    for mode in ("per-sample", "joined"):
        it = iter(per_sample if mode == "per-sample" else
                  [[(np.frombuffer(data, np.uint8), np.asarray(frames, np.int32))] for data, frames in joins])

        feed = _feeder(it)

        pipe = pipeline(bs if mode == "per-sample" else 1, args.threads, feed)
        wrong, times = 0, []
        for n, b in enumerate(batches):
            t0 = time.perf_counter()
            (out,) = pipe.run()
            out = out.as_cpu() if DEV != "cpu" else out
            if n >= 2:
                times.append(time.perf_counter() - t0)
            images = ([np.asarray(out.at(j))[0] for j in range(bs)] if mode == "per-sample"
                      else list(np.asarray(out.at(0))))
            wrong += sum(read_ids(img) != want for img, (want, _, _) in zip(images, b))
        del pipe
        results[mode] = np.mean(times) * 1e3
        print(f"{mode:10s}: {results[mode]:7.1f} ms per batch of {bs} ({results[mode] / bs:.2f} ms per sample), "
              f"{wrong} of {bs * nb} frames with other ids", flush=True)
    print(f"joined / per-sample time: {results['joined'] / results['per-sample']:.2f}")


if __name__ == "__main__":
    main()
