"""A two-member mixture's samples/s against its members' own rates, measured in one run.

    python3 benchmarks/mixture.py [--duration-s 15] [--rounds 2] [--out benchmarks/results/cpu-2core-mixture]

The members are `bench --sample mixture`'s (`tools/bench_samples.py`, BENCH_MIXTURES; written once under
.demo/bench-mixture/): `arm-av1`, 20 episodes with two 640x480 AV1 cameras at 30 fps (lerobot's encoder settings,
camera-like frames, a 6-dof arm), and `arm-h264`, 20 episodes with one 640x480 H.264 camera at 10 fps (a 7-dof arm
without the wrist camera: zeros and `observation.images.wrist_is_missing` in its samples). Two mixtures of them: weights 1:1 (every
frame once) and 1:3 (arm-h264's frames three times as often). For each, `tools/bench_mixture.py` streams every
member alone and then the mixture through the same steady window, each round in alternating order, and reports
the mixture's rate over `1 / sum(share / rate)` of the members' (what the mixture would deliver if mixing cost
nothing); the mixture's batches also carry the masks and padding of the two embodiments.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from _common import write_result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-s", type=float, default=15.0, help="each loader's steady window (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of members + mixture (default %(default)s)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--sample", default="mixture", help="which BENCH_MIXTURES sample (default %(default)s)")
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-mixture")
    args = ap.parse_args()

    from dali_stream.config import LoaderConfig
    from dali_stream.tools.bench import BenchConfig
    from dali_stream.tools.bench_mixture import run_mixture
    from dali_stream.tools.bench_samples import mixture_sample
    from dali_stream.tools.sample_data import write_sample

    def write(path, spec, why):
        print(f"writing {path} ({why})", flush=True)
        write_sample(path, spec, overwrite=True)

    even = Path(mixture_sample(args.sample, write))
    weighted = even.with_name("mixture-1-3.json")
    spec = json.loads(even.read_text())
    spec["members"][1]["weight"] = 3.0
    weighted.write_text(json.dumps(spec, indent=2))
    out = Path(args.out)
    summary = {"cpu_cores": len(os.sched_getaffinity(0)), "runs": {}}
    for name, path in (("weights 1:1", even), ("weights 1:3", weighted)):
        cfg = BenchConfig(dataset=str(path), duration_s=args.duration_s, warmup_batches=5, baseline=False, limit=False,
                          peers=False, loader=LoaderConfig(batch_size=args.batch_size, num_workers=args.num_workers,
                                                           device="cpu"))
        print(f"{name}: {path}", flush=True)
        result = run_mixture(cfg, progress=lambda stage: print(f"  {stage}", flush=True), rounds=args.rounds)
        mixed = result["mixture"]
        write_result(out / f"mixture-{name.split()[-1].replace(':', '-')}.json", result)
        summary["runs"][name] = {"ratio_median": mixed["ratio_median"], "epoch_shares": mixed["epoch_shares"],
                                 "rounds": [{k: r[k] for k in ("order", "samples_per_s", "window_shares",
                                                                "expected_samples_per_s", "ratio")}
                                            for r in mixed["rounds"]],
                                 "routes": result["routes"], "device": result["device"]}
        print(f"  ratio {mixed['ratio_median']:.3f} of the members' share-weighted rates", flush=True)
    print(write_result(out / "summary.json", summary))


if __name__ == "__main__":
    main()
