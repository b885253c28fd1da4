"""What the CPU route's last step costs per 480p frame: DALI's crop_mirror_normalize on the CPU (HWC uint8 in,
CHW float32 or uint8 out, the loader's graph for torchcodec frames on a CPU node) against torch doing the same.

    .venv/bin/python benchmarks/layout_cost.py [--out FILE]

One thread each (the loader's DALI threads and workers share the node's cores with decoding). Issue 15's
≥85 %-of-the-decode-limit target is missed on 2 cores by about this step's share (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import platform
import time

from _common import write_result


def main(argv=None) -> int:
    import numpy as np
    import torch
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    B, H, W = 16, 480, 640
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (1, H, W, 3), dtype=np.uint8) for _ in range(B)]
    res = {}
    for dtype, out_t, std in (("float32", types.FLOAT, 255.0), ("uint8", types.UINT8, 1.0)):
        for layout in ("FCHW", "FHWC"):
            pipe = Pipeline(batch_size=B, num_threads=1, device_id=None, prefetch_queue_depth=1, exec_dynamic=True)
            with pipe:
                x = fn.external_source(source=lambda: frames, batch=True, dtype=types.UINT8, layout="FHWC", ndim=4)
                pipe.set_outputs(fn.crop_mirror_normalize(x, mean=[0.0], std=[std], output_layout=layout, dtype=out_t))
            pipe.build()
            pipe.run()
            t = time.perf_counter()
            for _ in range(args.repeats):
                pipe.run()
            res[f"dali_cmn_{dtype}_{layout}_ms"] = (time.perf_counter() - t) / args.repeats / B * 1e3
            del pipe
    torch.set_num_threads(1)
    xs = [torch.from_numpy(f[0]) for f in frames]

    def timed(fn_):
        fn_()
        t = time.perf_counter()
        for _ in range(args.repeats):
            fn_()
        return (time.perf_counter() - t) / args.repeats / B * 1e3

    def to_float():
        for x in xs:
            y = torch.empty((3, H, W), dtype=torch.float32)
            y.copy_(x.permute(2, 0, 1))
            y.mul_(1 / 255.0)

    def to_uint8():
        for x in xs:
            x.permute(2, 0, 1).contiguous()

    res["torch_float32_FCHW_ms"] = timed(to_float)
    res["torch_uint8_FCHW_ms"] = timed(to_uint8)
    result = {"what": "milliseconds per 480x640 frame, one thread", "results": res,
              "machine": {"cpu_count": __import__("os").cpu_count(), "platform": platform.platform()}}
    for k, v in res.items():
        print(f"{k:28s} {v:6.2f}")
    if args.out:
        write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
