"""What starting the loader costs beside `import torch`: `import dali_stream` and the constructor, in a fresh process
each run, against a process that imports torch alone, alternated.

    .venv/bin/python benchmarks/start_cost.py [DATASET ...] [--rounds 5]
        [--out benchmarks/results/cpu-2core-start-cost/start_cost.json]

DATASETs default to the README sample (`.demo/sample`: 96x128 H.264, AV1 and VP9 cameras) and a LIBERO-shaped one
(`.demo/host-path-libero`: two 256x256 AV1 cameras, 10 fps, written by `benchmarks/host_path.py`). Each run: a new
Python process times `import torch`, then `import dali_stream`, then `StreamLoader(DATASET, device="cpu")` (the
constructor: metadata, routes, the decoders' libraries a route needs, the DALI graph where one is built), and says
which of torchcodec and DALI the process imported. "beyond torch" is the dali_stream import plus the constructor,
in the same process; the torch-alone run is the reference for what `import torch` costs on a cold interpreter.
`DATASET@compile` runs import `torch._dynamo` with torch, before the clock starts, as a job that calls
`torch.compile` does: what the loader costs such a job (torchcodec's ops import `torch._dynamo` at import).
Every configuration runs once untimed first, and the children may write bytecode (`PYTHONDONTWRITEBYTECODE` is
dropped from their environment): an installed package starts from its `.pyc` files, not its sources.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

from _common import alternate, child, spread, write_result

ROOT = Path(__file__).resolve().parents[1]

TORCH = """
import time
t0 = time.perf_counter()
import torch
RESULT = {"torch_s": round(time.perf_counter() - t0, 3)}
"""

START = """
import sys, time
t0 = time.perf_counter()
import torch
if sys.argv[2] == "compile":
    import torch._dynamo  # what a job that calls torch.compile imports anyway (torchcodec's ops import it too)
t1 = time.perf_counter()
import dali_stream
t2 = time.perf_counter()
loader = dali_stream.StreamLoader(sys.argv[1], device="cpu")
t3 = time.perf_counter()
RESULT = {"torch_s": round(t1 - t0, 3), "import_s": round(t2 - t1, 3), "construct_s": round(t3 - t2, 3),
          "beyond_torch_s": round(t3 - t1, 3), "routes": sorted(set(loader.routes.values())),
          "torchcodec": "torchcodec" in sys.modules, "dali": "nvidia.dali" in sys.modules}
loader.close()
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", nargs="*", default=[".demo/sample", ".demo/host-path-libero"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-start-cost/start_cost.json")
    args = ap.parse_args()
    missing = [d for d in args.datasets if not (Path(d) / "meta/info.json").exists()]
    if missing:
        raise SystemExit(f"no dataset at {missing}: write the README sample with `make demo`, the LIBERO-shaped one "
                         "with `.venv/bin/python benchmarks/host_path.py`, or name datasets that exist")
    configs = ["torch", *args.datasets, *(f"{d}@compile" for d in args.datasets)]

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as an installed package: .pyc kept

    def run(config: str) -> dict:
        if config == "torch":
            return child(TORCH, cwd=ROOT, env=env)
        dataset, _, compile_ = config.partition("@")
        return child(START, str(Path(dataset).resolve()), compile_ or "-", cwd=ROOT, env=env)

    for config in configs:  # once untimed: the modules' bytecode written, the files in the page cache
        run(config)

    got = alternate(configs, args.rounds, run)
    report = {"rounds": args.rounds, "host": platform.node(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
              "torch_alone_s": spread(r["torch_s"] for r in got["torch"]),
              "datasets": {d: {k: spread(r[k] for r in got[d])
                               for k in ("torch_s", "import_s", "construct_s", "beyond_torch_s")}
                           | {"routes": got[d][0]["routes"], "torchcodec": got[d][0]["torchcodec"],
                              "dali": got[d][0]["dali"]} for d in configs[1:]},
              "runs": got}
    print(write_result(args.out, report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
