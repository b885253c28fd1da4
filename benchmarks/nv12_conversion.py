"""NVDEC's NV12 to RGB three ways: the float conversion the loader used until 2026-12 (three float planes of a
16-picture slice, tests/support/float_nv12.py), `decode.nv12`'s portable integer form (torch operations over bands
of 32-bit values) and, on a CUDA GPU, its fused kernel (one jiterator launch a stack): milliseconds per picture and
the memory held beside the output, per picture size and stack.

    .venv/bin/python benchmarks/nv12_conversion.py [--device cpu|cuda] [--rounds 3] [--out FILE]

Each way a round in a process of its own (`_common.child`), one thread, after a first conversion of a small picture
(torch's first allocations; the kernel's compile and check); timed over `--repeat` stacks, synchronised on a GPU.
The memory beside the output: the growth of the peak RSS (CPU) or of `torch.cuda.max_memory_allocated` (GPU) over
the stacks, less the output's bytes. Ways alternate within a round (`_common.alternate`).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

from _common import alternate, child, spread, within_rounds, write_result

ROOT = Path(__file__).resolve().parent.parent
CASES = {"480p x16": (16, 480, 640), "480p x1": (1, 480, 640), "1080p x8": (8, 1080, 1920)}
WAYS = {"cpu": ("float", "portable"), "cuda": ("float", "portable", "fused")}

_RUN = """
import resource, sys, time, torch
sys.path.insert(0, sys.argv[1])
from dali_stream.decode.colour import Colour
from dali_stream.decode.nv12 import nv12_to_rgb
from tests.support.float_nv12 import nv12_to_rgb as float_nv12_to_rgb
way, n, height, width, device, repeat = sys.argv[2], *map(int, sys.argv[3:6]), sys.argv[6], int(sys.argv[7])
torch.set_num_threads(1)
small = torch.randint(0, 256, (1, 24, 16), dtype=torch.uint8).to(device)
nv12 = torch.randint(0, 256, (n, height * 3 // 2, width), dtype=torch.uint8).to(device)
ways = {"float": lambda x, h, w: float_nv12_to_rgb(x, h, w, Colour()),
        "portable": lambda x, h, w: nv12_to_rgb(x, h, w, Colour(), fused=False),
        "fused": lambda x, h, w: nv12_to_rgb(x, h, w, Colour(), fused=True)}
ways[way](small, 16, 16)  # first use on a small picture: torch's own allocations, the kernel's compile and check
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
sync()
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()
base = torch.cuda.memory_allocated() if device == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0 = time.perf_counter()
out = None
for _ in range(repeat):
    out = None  # one output alive at a time
    out = ways[way](nv12, height, width)
    sync()
ms = (time.perf_counter() - t0) / (repeat * n) * 1e3
peak = torch.cuda.max_memory_allocated() if device == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
RESULT = {"ms_per_picture": ms, "beside_output_mb": (peak - base - out.numel()) / 2**20}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    result: dict = {"machine": platform.node(), "device": args.device, "rounds": args.rounds, "cases": {}}
    for case, (n, height, width) in CASES.items():
        def run(way: str) -> dict:
            return child(_RUN, str(ROOT), way, str(n), str(height), str(width), args.device, str(args.repeat))

        got = alternate(WAYS[args.device], args.rounds, run)
        result["cases"][case] = {
            way: {"ms_per_picture": spread(r["ms_per_picture"] for r in runs),
                  "beside_output_mb": spread(r["beside_output_mb"] for r in runs)} for way, runs in got.items()}
        for way in WAYS[args.device][1:]:
            result["cases"][case][f"float_over_{way}"] = within_rounds(got["float"], got[way], "ms_per_picture")
    text = write_result(args.out, result) if args.out else None
    print(text or result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
