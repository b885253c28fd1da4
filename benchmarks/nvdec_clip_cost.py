"""What DALI 2.4's mixed video decoder (NVDEC) costs per sample, on a GPU node: fixed per sample or per frame?

    python3 benchmarks/nvdec_clip_cost.py DATASET            (DEV=cpu KEY=<vp9 camera>: the DALI CPU decoder)

For random one-frame samples (`span` 1) and 8-frame windows of the dataset's first camera (KEY to choose),
the per-sample clips the loader feeds DALI (`graph.clips.dali_input`) are decoded in batches through
`fn.decoders.video(device="mixed")`, with 2, 7 and 16 threads and batches of 8 to 64; then whole segments
from frame 0 (what DALI decodes without clips). Prints milliseconds per batch and per clip (mean of 8
batches after 2 warm-up ones). Results: benchmarks/results/<gpu>/nvdec-clip-cost.txt.
"""

import os
import sys
import time

import numpy as np
from nvidia.dali import fn, types
from nvidia.dali.pipeline import Pipeline

from dali_stream import StreamLoader
from dali_stream.decode.cpu import DecoderCache
from dali_stream.fetch.store import EpisodeStore
from dali_stream.graph.clips import dali_input

root = sys.argv[1]
DEV = os.environ.get("DEV", "mixed")
L = StreamLoader(root, batch_size=4, decode="cpu", image_dtype="uint8", device="cpu")
store = EpisodeStore(L.catalog, L.config.tolerance_s, 1 << 30, DecoderCache(1), 0)  # the loader's episodes, read again
key = os.environ.get("KEY", "observation.images.front")
rng = np.random.default_rng(0)
lengths = L.meta.lengths.tolist()
segs = [store.segment(p, key) for p in range(len(lengths))]


def inputs(n, span):
    out = []
    for _ in range(n):
        p = int(rng.integers(len(lengths)))
        seg = segs[p]
        f = int(rng.integers(0, len(seg.pts_s) - span))
        out.append(dali_input(seg, np.arange(f, f + span)))
    return out


def timeit(threads, bs, span, whole=False, nb=8):
    data = inputs(bs * (nb + 2), span)
    if whole:  # the whole segment from frame 0 (what DALI does without clips)
        data = [(np.frombuffer(segs[0].data, np.uint8), np.arange(0, span, dtype=np.int32)) for _ in data]
    else:
        data = [(d.data, d.frames) for d in data]
    it = iter([data[i:i + bs] for i in range(0, len(data), bs)])

    def src():
        b = next(it)
        return [x[0] for x in b], [x[1] for x in b]

    pipe = Pipeline(batch_size=bs, num_threads=threads, device_id=0 if DEV != "cpu" else None,
                    prefetch_queue_depth=1, exec_dynamic=True)
    with pipe:
        e, fr = fn.external_source(source=src, num_outputs=2, batch=True, dtype=[types.UINT8, types.INT32])
        pipe.set_outputs(fn.decoders.video(e, frames=fr, device=DEV, pad_mode="none"))
    pipe.build()
    for _ in range(2):
        pipe.run()
    t0 = time.perf_counter()
    for _ in range(nb):
        (o,) = pipe.run()
    if DEV != "cpu":
        o.as_cpu()
    dt = (time.perf_counter() - t0) / nb
    fed = np.mean([int(x[1].max()) + 1 for x in data])
    print(f"threads={threads:2d} bs={bs:3d} span={span} whole={whole}: {dt*1e3:7.1f} ms/batch, {dt/bs*1e3:6.2f} ms/clip, "
          f"{bs/dt:7.1f} clips/s, frames fed/clip {fed:.1f}", flush=True)
    del pipe


for threads in (2, 7, 16):
    timeit(threads, 32, 1)
timeit(7, 32, 8)
timeit(7, 64, 1)
timeit(7, 8, 1)
timeit(7, 32, 1, whole=True)
timeit(7, 32, 30, whole=True)
