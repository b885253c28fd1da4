"""Every frame of the GPU test dataset's NVDEC cameras, decoded by DALI's mixed decoder from the clips the loader
cuts, in batches: how many come back with other painted ids than asked (H.264, HEVC, VP9; 192x160, GOP 16).

    python3 benchmarks/nvdec_clip_ids.py          (DEV=cpu: the DALI CPU decoder, camera top (VP9) only)

Runs: clips with 7 and 1 decoder threads, batches of 4 and 16, shuffled orders; whole segments; HEVC alone.
Results: benchmarks/results/<gpu>/nvdec-clip-ids.txt."""
import os
import sys
import time

import numpy as np
from _common import gpu_test_dataset
from nvidia.dali import fn, types
from nvidia.dali.pipeline import Pipeline

from dali_stream import StreamLoader
from dali_stream.decode.cpu import DecoderCache
from dali_stream.fetch.store import EpisodeStore
from dali_stream.graph.clips import dali_input
from dali_stream.tools.paint import UnreadableIds, read_ids

DEV = os.environ.get("DEV", "mixed")
p = gpu_test_dataset()
L = StreamLoader(str(p), batch_size=4, decode="cpu", image_dtype="uint8", device="cpu")
store = EpisodeStore(L.catalog, L.config.tolerance_s, 1 << 30, DecoderCache(1), 0)  # the loader's episodes, read again
eps = L.meta.episodes["episode_index"].tolist()
lengths = L.meta.lengths.tolist()
cams = {"front": "observation.images.front", "side": "observation.images.side", "top": "observation.images.top"}
items = []  # (cam, ep, frame, data, frames, clip)
for pos, ep in enumerate(eps):
    for c, key in cams.items():
        seg = store.segment(pos, key)
        rows = store.rows(pos)
        q = float(L.meta.cameras[key].from_timestamp[pos]) + rows["timestamp"].astype(np.float64)
        idx = seg.frame_indices(q, 1e-4, "x")
        for f in range(lengths[pos]):
            d = dali_input(seg, np.array([idx[f]]))
            whole = (np.frombuffer(seg.data, np.uint8), np.array([idx[f]], np.int32))
            items.append((c, ep, f, d.data, d.frames, whole))
print("samples", len(items), flush=True)

def run(mode, threads, bs, order_seed, cams_sel=None):
    sel = [it for it in items if cams_sel is None or it[0] in cams_sel]
    rng = np.random.default_rng(order_seed)
    sel = [sel[i] for i in rng.permutation(len(sel))]
    batches = [sel[i:i + bs] for i in range(0, len(sel), bs)]
    it = iter(batches)
    def src():
        b = next(it)
        if mode == "clip":
            return [x[3] for x in b], [x[4] for x in b]
        return [x[5][0] for x in b], [x[5][1] for x in b]
    pipe = Pipeline(batch_size=bs, num_threads=threads, device_id=None if DEV=="cpu" else 0, prefetch_queue_depth=2, exec_dynamic=True)
    with pipe:
        e, fr = fn.external_source(source=src, num_outputs=2, batch=True, dtype=[types.UINT8, types.INT32])
        pipe.set_outputs(fn.decoders.video(e, frames=fr, device=DEV, pad_mode="none"))
    pipe.build()
    bad, n, t0 = [], 0, time.perf_counter()
    for bi, b in enumerate(batches):
        if len(b) < bs:
            break
        (out,) = pipe.run()
        out = out.as_cpu() if DEV != "cpu" else out
        for j, x in enumerate(b):
            img = np.asarray(out.at(j))[0]
            try:
                got = read_ids(img)
            except UnreadableIds as exc:
                got = ("unreadable", str(exc)[:40])
            n += 1
            if got != (x[1], x[2]):
                bad.append((bi, j, x[0], (x[1], x[2]), got, len(x[3]) if mode == "clip" else len(x[5][0]), x[4].tolist() if mode=="clip" else x[5][1].tolist(),
                            [(y[0], y[1], y[2]) for y in b]))
    del pipe
    by = {}
    for r in bad:
        by[r[2]] = by.get(r[2], 0) + 1
    print(f"{mode:5s} threads={threads} bs={bs} seed={order_seed}: {len(bad)}/{n} wrong {by} ({time.perf_counter()-t0:.1f}s)", flush=True)
    for r in bad[:6]:
        print("   ", r, flush=True)
    return bad

if DEV == "cpu":
    run("clip", 2, 4, 0, cams_sel={"top"})
    sys.exit()
run("clip", 7, 4, 0)
run("clip", 1, 4, 0)
run("clip", 7, 16, 1)
run("whole", 7, 4, 0)
run("clip", 7, 4, 2, cams_sel={"side"})
run("clip", 1, 1, 3, cams_sel={"side"})
