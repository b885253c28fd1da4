"""`dali-stream transcode` measured: its time and the new files' size and PSNR over a few GOP sizes, and the CPU
route's samples/s on each result against the original, alternated.

    .venv/bin/python benchmarks/transcode.py DATASET [DATASET ...] [--configs h264:2,h264:8,h264:32,hevc:8]
        [--rounds 3] [--batches 40] [--out benchmarks/results/cpu-2core-transcode/transcode.json]

Each dataset is transcoded once per (codec, GOP) of `--configs` into `.demo/transcode-bench/` (its wall time, with every core: the
command's default), the report's size ratio and PSNR kept. The loader then reads the original and every result,
one process each, alternated `--rounds` times: `StreamLoader(root, device="cpu", episode_pool_size="all")` (a global
shuffle: every sample a random access, what a GOP costs most), `--batches` batches after 3 untimed ones, samples/s;
ratios against the original are taken within a round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import alternate, child, spread, within_rounds, write_result

ROOT = Path(__file__).resolve().parents[1]

RUN = r"""
import sys, time
from dali_stream import StreamLoader
loader = StreamLoader(sys.argv[1], device="cpu", episode_pool_size="all", batch_size=16)
batches = int(sys.argv[2])
it = iter(loader)
for _ in range(3):
    next(it)
t0, n = time.perf_counter(), 0
for k, batch in enumerate(it):
    n += len(batch["index"])
    if k + 1 >= batches:
        break
RESULT = {"samples_per_s": n / (time.perf_counter() - t0), "routes": sorted(set(loader.routes.values()))}
it.close()
loader.close()
"""


def transcode(source: str, dest: Path, codec: str, gop: int) -> dict:
    """One transcode, timed; its report."""
    if dest.exists():
        shutil.rmtree(dest)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dali_stream", "transcode", source, str(dest), "--codec", codec,
                           "--gop", str(gop)], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"transcode failed:\n{done.stderr[-3000:]}")
    report = json.loads((dest / "transcode_report.json").read_text())
    info = json.loads((Path(source) / "meta/info.json").read_text())
    video_s = sum(c["frames"] for c in report["cameras"].values()) / float(info["fps"])
    return {"seconds": round(seconds, 1), "seconds_per_video_hour": round(seconds / video_s * 3600, 1),
            "cameras": {k: {"size_ratio": round(c["size_ratio"], 3), "psnr_mean": round(c["psnr_mean"], 2),
                            "psnr_worst": round(c["psnr_worst"], 2)} for k, c in report["cameras"].items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--configs", default="h264:2,h264:8,h264:32,hevc:8", help="codec:gop pairs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-transcode/transcode.json")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    report: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "rounds": args.rounds,
                    "batches": args.batches, "datasets": {}}
    for dataset in args.datasets:
        name = Path(dataset).name
        made: dict[str, str] = {"original": str(Path(dataset).resolve())}
        transcodes: dict[str, dict] = {}
        for config in args.configs.split(","):
            codec, gop = config.split(":")
            label = f"{codec} gop {gop}"
            dest = ROOT / ".demo/transcode-bench" / f"{name}-{codec}-g{gop}"
            transcodes[label] = transcode(str(Path(dataset).resolve()), dest, codec, int(gop))
            made[label] = str(dest)
            print(name, label, transcodes[label], flush=True)
        runs = alternate(list(made), args.rounds,
                         lambda label: child(RUN, made[label], str(args.batches), cwd=ROOT, env=env))
        report["datasets"][name] = {
            "transcodes": transcodes,
            "samples_per_s": {label: spread(r["samples_per_s"] for r in runs[label]) for label in made},
            "against_original": {label: within_rounds(runs[label], runs["original"], "samples_per_s")
                                 for label in made if label != "original"},
            "runs": runs}
    print(write_result(args.out, report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
