"""What the CPU route's last step costs per 480p frame: DALI's crop_mirror_normalize on the CPU (HWC uint8 in,
CHW float32 or uint8 out, the loader's graph for torchcodec frames on a CPU node before host frames), torch
doing the same, the loader's own write today (`scatter_frames`, per layout and dtype; its float32 divides by 255,
as lerobot does) beside the multiply by 1/255 it replaced, the graph's float32 today (a uint8 layout, then the
division), and the floor of a float32 output (filling the frame's 3.7 MB, nothing read).

    .venv/bin/python benchmarks/layout_cost.py [--repeats 20] [--rounds 3] [--out FILE]

One thread each (the loader's DALI threads and workers share the node's cores with decoding). Every way is timed
once a round (`--repeats` batches of 16), the rounds back to back (`_common.alternate`): median and range. The
≥85 %-of-the-decode-limit target is missed on 2 cores by about this step's share (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import platform

from _common import alternate, ms_per, spread, write_result


def main(argv=None) -> int:
    import numpy as np
    import torch
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    B, H, W = 16, 480, 640
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (1, H, W, 3), dtype=np.uint8) for _ in range(B)]
    ways = {}  # name -> one batch's work (a pipeline's bound `run` keeps the pipeline)
    for dtype, out_t, std in (("float32", types.FLOAT, 255.0), ("uint8", types.UINT8, 1.0)):
        for layout in ("FCHW", "FHWC"):
            pipe = Pipeline(batch_size=B, num_threads=1, device_id=None, prefetch_queue_depth=1, exec_dynamic=True)
            with pipe:
                x = fn.external_source(source=lambda: frames, batch=True, dtype=types.UINT8, layout="FHWC", ndim=4)
                pipe.set_outputs(fn.crop_mirror_normalize(x, mean=[0.0], std=[std], output_layout=layout, dtype=out_t))
            pipe.build()
            ways[f"dali_cmn_{dtype}_{layout}_ms"] = pipe.run
    for layout in ("FCHW", "FHWC"):  # the graph's float32 today: a uint8 layout, then lerobot's division by 255
        pipe = Pipeline(batch_size=B, num_threads=1, device_id=None, prefetch_queue_depth=1, exec_dynamic=True)
        with pipe:
            x = fn.external_source(source=lambda: frames, batch=True, dtype=types.UINT8, layout="FHWC", ndim=4)
            laid = fn.crop_mirror_normalize(x, mean=[0.0], std=[1.0], output_layout=layout, dtype=types.UINT8)
            pipe.set_outputs(laid / types.Constant(255.0, dtype=types.FLOAT))
        pipe.build()
        ways[f"dali_cmn_uint8_divide_float32_{layout}_ms"] = pipe.run
    torch.set_num_threads(1)
    xs = [torch.from_numpy(f[0]) for f in frames]

    def to_float():
        for x in xs:
            y = torch.empty((3, H, W), dtype=torch.float32)
            y.copy_(x.permute(2, 0, 1))
            y.mul_(1 / 255.0)

    def to_uint8():
        for x in xs:
            x.permute(2, 0, 1).contiguous()

    ways["torch_float32_FCHW_ms"] = to_float
    ways["torch_uint8_FCHW_ms"] = to_uint8

    # The loader's own write on a CPU node (host frames: `graph.host.scatter_frames`, numpy, into reused
    # batch buffers as its BufferPool hands them out), per layout and dtype; and the floor of any float32
    # output, filling a frame's 3.7 MB with one value (no reading at all).
    from dali_stream.graph.host import host_dtype, host_shape, scatter_frames
    from dali_stream.graph.imageops import ImageOps

    decoded = np.concatenate(frames)  # (B, H, W, 3), as a segment's decoded frames
    wanted = np.arange(B)
    for dtype in ("float32", "uint8"):
        for channels_last in (False, True):
            ops = ImageOps.make(dtype, channels_last=channels_last)
            bufs = [np.ones(host_shape(ops, B, 1, H, W), host_dtype(ops)) for _ in range(4)]  # touched: no page faults
            turn = iter(range(10**9))
            ways[f"loader_{dtype}_{'FHWC' if channels_last else 'FCHW'}_ms"] = (
                lambda bufs=bufs, turn=turn, ops=ops: scatter_frames(
                    bufs[next(turn) % 4], decoded, list(range(B)), wanted, [np.array([j]) for j in range(B)], ops))
    # what the loader's float32 write was before it divided: the cast copy, then a multiply by float32(1 / 255)
    mul_bufs = [np.ones((B, 3, H, W), np.float32) for _ in range(4)]

    def multiplied(turn=iter(range(10**9))):
        out = mul_bufs[next(turn) % 4]
        for j in range(B):
            out[j] = decoded[j].transpose(2, 0, 1)
            np.multiply(out[j], np.float32(1.0 / 255.0), out=out[j])

    ways["loader_multiply_float32_FCHW_ms"] = multiplied
    fill_bufs = [np.ones((B, 3, H, W), np.float32) for _ in range(4)]
    turn = iter(range(10**9))
    ways["float32_fill_floor_ms"] = lambda: fill_bufs[next(turn) % 4].fill(0.5)
    got = alternate(list(ways), args.rounds, lambda name: ms_per(ways[name], B, args.repeats, warm=True),
                    say=lambda _: None)
    res = {name: spread(r["ms"] for r in rs) for name, rs in got.items()}
    result = {"what": "milliseconds per 480x640 frame, one thread: median and range over the rounds",
              "rounds": args.rounds, "repeats": args.repeats, "results": res,
              "machine": {"cpu_count": __import__("os").cpu_count(), "platform": platform.platform()}}
    for k, v in res.items():
        print(f"{k:28s} {v['median']:6.2f}  ({v['range'][0]:.2f}-{v['range'][1]:.2f})")
    if args.out:
        write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
