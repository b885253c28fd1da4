"""Tier 2 of a GPU visit: the whole loader on NVDEC's open-decoder engine, once DALI is staged on the node.

    python benchmarks/gpu_second.py prepare --stage-tool PATH  # on the CPU machine: cut the wheels into parts
    python benchmarks/gpu_second.py measure --out DIR [--route nvdec-open|cpu-open] [--data .demo/gpu-first]

`prepare` cuts the wheels the loader needs there (DALI 2.4 and its small dependencies, PyAV, torchcodec 0.11.1,
torch 2.11's pair) into parts of at most 56 MiB under .devwheels/ with a staging tool that leaves an `apply.sh` in
each part (`PATH` names it; one part per call, carrying it: `bash .devwheels/part-NN/apply.sh; rm -rf
.devwheels/part-NN`, the last one installs every wheel into /tmp/site), and prints the calls they take. Run it
before the visit: the node idles while it runs.

`measure` runs, in this order, each step's result written to DIR before the next begins (a call cut short keeps
what it got), each step's JSON folded into `gpu_second.json` (a device call returns at most 8 files: DIR holds 6):
1. the whole loader on NVDEC's open engine in decode processes against the CPU route on every core of the node
   (`benchmarks/gpu_processes.py`, its doc says what it measures): the tier-1 datasets (H.264 640x480 and 256x256,
   one frame and 8-step windows; HEVC 640x480 against cpu-open), `decode_processes` 0 (the threaded engine), 7, 4,
   2, 1 and the loader's default, batch 64, 2-s windows: samples/s, NVDEC utilisation (NVML), the engine's
   counters (restarts), every frame's painted ids; no run starts after `PROCESSES_BUDGET_S` (~130 s planned on an
   H200);
2. the boundary matrix and the wild encodings through `nvdec-open` (the `gpu`-marked tests that earn
   `decode/proven.py`'s entries), with a JUnit file, on 4 processes where pytest-xdist is there (the node's image
   has it: on one process the 15 tests passed 240 s on an H200 at 8 of them);
3. the H.264 and HEVC datasets as one mixture on NVDEC, with `--gpu-load` (bfloat16 matmuls on the loader's GPU
   beside it): whether decode stalls a training step's kernels.
`python benchmarks/gpu_decide.py DIR/..` then says which `decode/proven.py` entries the results earn.
With `--route cpu-open` (the CI dry run): FFmpeg's decoders in NVDEC's place, no GPU load, and the boundary tests
of `cpu-open` (tests/loader/test_boundaries.py) collected, not run (CI runs them), so a wrong flag or path fails on the CPU
first.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".demo/gpu-first"
# What the loader needs on the node beyond what it has (Python 3.12, torch 2.11+cu130, numpy, pyarrow, fsspec):
# DALI and its small dependencies (the image codecs left out: the video decoder does not load them), PyAV (the
# colours FFmpeg reads, segment cuts it falls back to), torchcodec 0.11.1 (torch 2.11's: the CPU route beside).
WHEELS = ("nvidia-dali-cuda120==2.4.0", "astunparse", "gast", "optree", "makefun", "nvtx", "av==18.1.0",
          "torchcodec==0.11.1", "pynvvideocodec==2.2.4", "rich", "psutil")
STEP_TIMEOUT_S = 240
PROCESSES_BUDGET_S = 140  # the loader in decode processes (step 1): no run starts after this
PROCESSES_TIMEOUT_S = 250  # the budget, one run's own limit (gpu_processes.RUN_TIMEOUT_S) and its start
BOUNDARY_TIMEOUT_S = 330  # the boundary matrix's step (on 4 processes); the benches' steps take STEP_TIMEOUT_S


def prepare(stage_tool: Path) -> int:
    if not stage_tool.exists():
        print(f"gpu-second prepare: the staging tool {stage_tool} is not here; cut the wheels {' '.join(WHEELS)} "
              "into parts of at most 56 MiB by hand", file=sys.stderr)
        return 2
    proc = subprocess.run(["bash", str(stage_tool), *WHEELS], cwd=ROOT)
    parts = sorted((ROOT / ".devwheels").glob("part-*"))
    print(f"{len(parts)} parts: one device call each, carrying .devwheels/part-NN: `bash .devwheels/part-NN/apply.sh; "
          "rm -rf .devwheels/part-NN`; then one call that measures: `bash benchmarks/gpu_second.sh`")
    return proc.returncode


def _run(name: str, cmd: list[str], out: Path, report: dict, env: dict, timeout_s: float = STEP_TIMEOUT_S,
         results: Path | None = None, pattern: str = "bench-*.json") -> None:
    """Step `name`: `cmd`'s output in `name.log`, its status and time in the report; `results`: the step's output
    folder, whose JSON results (`pattern`) are folded into the report's step (and the folder removed)."""
    t0 = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        try:
            proc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout_s)
            status = proc.returncode
        except subprocess.TimeoutExpired:
            status = "timeout"
    report["steps"][name] = {"command": " ".join(cmd), "status": status, "seconds": time.perf_counter() - t0}
    if results is not None and results.is_dir():
        report["steps"][name]["results"] = [json.loads(p.read_text()) for p in sorted(results.glob(pattern))]
        shutil.rmtree(results, ignore_errors=True)
    (out / "gpu_second.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"{name}: {status} in {time.perf_counter() - t0:.0f} s", flush=True)


def measure(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = args.route == "nvdec-open"
    data = Path(args.data)
    mixture = out / "mixture.json"
    mixture.write_text(json.dumps({"members": [{"source": str(data / "h264"), "name": "h264"},
                                               {"source": str(data / "hevc"), "name": "hevc"}]}))
    dali_stream = [sys.executable, "-m", "dali_stream"]
    decode = ["--decode", "gpu", "--nvdec-engine", "open"] if gpu else ["--decode", "cpu-open"]
    short = ["--duration-s", str(args.window_s), "--warmup-batches", "2", "--no-baseline", "--no-peers"]
    report: dict = {"route": args.route, "date": time.strftime("%Y-%m-%d %H:%M"), "steps": {}}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def bench(name: str, dataset: Path, extra: list[str]) -> None:
        _run(name, [*dali_stream, "bench", str(dataset), *decode, "--batch-size", "64", *extra, *short,
                    "--out-dir", str(out / name)], out, report, env, results=out / name)

    # what `decode/proven.py`'s entries need first (`benchmarks/gpu_decide.py`): the loader against the CPU route per
    # codec and frame size, at each decode_processes and its default, then the checks
    window = args.processes_window_s if args.processes_window_s is not None else min(args.window_s, 2.0)
    _run("processes", [sys.executable, str(ROOT / "benchmarks/gpu_processes.py"), "--out", str(out / "processes"),
                       "--data", str(data), "--route", args.route, "--window-s", str(window),
                       "--budget-s", str(args.processes_budget_s)],
         out, report, env, PROCESSES_TIMEOUT_S + args.processes_budget_s - PROCESSES_BUDGET_S,
         results=out / "processes", pattern="processes.json")
    # the CPU dry run only collects them (CI runs them anyway): the selection must name tests that exist
    processes = ["-n", "4"] if gpu and importlib.util.find_spec("xdist") is not None else []
    tests = (["tests/gpu/test_gpu.py", "-k", "open_engine", "-m", "gpu", *processes] if gpu
             else ["tests/loader/test_boundaries.py", "-k", "cpu-open", "--collect-only"])
    _run("boundaries", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests,
                        f"--junitxml={out / 'boundaries.xml'}"], out, report, env, BOUNDARY_TIMEOUT_S)
    bench("mixture_beside_kernel", mixture, [*(["--gpu-load"] if gpu else []), "--no-limit"])
    failed = [n for n, s in report["steps"].items() if s["status"] != 0]
    report["failed"] = failed
    (out / "gpu_second.json").write_text(json.dumps(report, indent=1) + "\n")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="cut the wheels the loader needs on the node into parts (CPU machine)")
    p.add_argument("--stage-tool", required=True, help="the tool that cuts wheels into parts (PKG==VER ... arguments)")
    p = sub.add_parser("measure", help="the loader on NVDEC against the CPU route, the mixture, the boundaries")
    p.add_argument("--out", required=True)
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--route", default="nvdec-open", choices=("nvdec-open", "cpu-open"))
    p.add_argument("--window-s", type=float, default=8.0, help="the mixture's window (the sweep's: at most 2 s)")
    p.add_argument("--processes-window-s", type=float, help="the decode-processes sweep's windows (default: "
                                                             "--window-s, at most 2 s)")
    p.add_argument("--processes-budget-s", type=float, default=PROCESSES_BUDGET_S,
                   help="no run of the sweep starts after this many seconds")
    args = ap.parse_args(argv)
    return prepare(Path(args.stage_tool)) if args.command == "prepare" else measure(args)


if __name__ == "__main__":
    sys.exit(main())
