"""A 50-member mixture's construction time and memory against one dataset of the same episodes.

    python3 benchmarks/mixture_scale.py [--members 50] [--batches 150] [--rounds 2]
        [--out benchmarks/results/cpu-2core-mixture/scale.json]

The members are small sample datasets of alternating embodiments (written once under .demo/mixture-scale/):
even members 30 fps with a 6-dof state and a front camera, odd ones 10 fps, 7-dof, their camera named `top`
and mapped onto `front`; 3 episodes of 20-40 frames each, 64x64 H.264. The single dataset holds as many
episodes and cameras (`members x 3` episodes, one front camera). Each measurement runs in a fresh process
(`--child`): the loader's construction time (median of 3, after one untimed construction that loads the
libraries), the process's resident memory after construction and after streaming `--batches` batches (batch 16,
2 workers), and the loader's `memory_budget()` peaks against their bounds (cache, parquet footers, MP4 indexes:
one of each however many members). The two alternate, `--rounds` times (`_common.alternate`): the mixture's
construction time over the single dataset's within a round, median and range.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import alternate, spread, within_rounds, write_result

ROOT = Path(".demo/mixture-scale")
EPISODES = 3


def write_members(n: int) -> list[dict]:
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    members = []
    for i in range(n):
        odd = i % 2 == 1
        path = ROOT / f"m{i:02d}"
        if not (path / "meta/info.json").exists():
            write_sample(path, SampleSpec(episodes=EPISODES, min_length=20, max_length=40, height=64, width=64, gop=8,
                                          episodes_per_file=EPISODES, fps=10 if odd else 30, state_dim=7 if odd else 6,
                                          cameras=parse_cameras("top:h264" if odd else "front:h264"), seed=i,
                                          id_offset=100 * i), overwrite=True)
        members.append({"source": str(path.resolve()), "name": f"m{i:02d}",
                        **({"keys": {"observation.images.top": "observation.images.front"}} if odd else {})})
    return members


def write_single(n: int) -> str:
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    path = ROOT / f"single-{n * EPISODES}"
    if not (path / "meta/info.json").exists():
        write_sample(path, SampleSpec(episodes=n * EPISODES, min_length=20, max_length=40, height=64, width=64, gop=8,
                                      episodes_per_file=EPISODES, cameras=parse_cameras("front:h264"), seed=1),
                     overwrite=True)
    return str(path.resolve())


def child(kind: str, source: str, batches: int) -> dict:
    import psutil

    from dali_stream import StreamLoader
    from dali_stream.mixture import load_mixture

    target = load_mixture(source) if kind == "mixture" else source
    args = dict(batch_size=16, num_workers=2, device="cpu", delta_timestamps={"action": [0.0, 0.1]})
    StreamLoader(target, **args).close()  # libraries loaded, files warm in the page cache
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        loader = StreamLoader(target, **args)
        times.append(time.perf_counter() - t0)
        loader.close()
    me = psutil.Process()
    before = me.memory_info().rss
    loader = StreamLoader(target, **args)
    built = me.memory_info().rss
    done = 0
    while done < batches:
        for _ in loader:
            done += 1
            if done >= batches:
                break
    streamed = me.memory_info().rss
    budget = loader.memory_budget()
    return {"construct_s": times, "construct_s_median": statistics.median(times),
            "rss_before_mb": before / 2**20, "rss_after_construct_mb": built / 2**20,
            "rss_after_batches_mb": streamed / 2**20, "batches": done,
            "episodes": int(loader.catalog.num_episodes), "members": len(loader.catalog.members),
            "memory_budget": {k: budget[k] for k in ("cache_peak", "cache_bound", "table_footers_peak",
                                                     "table_footers_bound", "mp4_indexes_peak", "mp4_indexes_bound")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=50)
    ap.add_argument("--batches", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the two, alternated (default %(default)s)")
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-mixture/scale.json")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "SOURCE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.batches)))
        return
    members = write_members(args.members)
    mixture = ROOT / f"mixture-{args.members}.json"
    mixture.write_text(json.dumps({"members": members}, indent=2))
    single = write_single(args.members)
    out: dict = {"members": args.members, "episodes_per_member": EPISODES, "batches": args.batches,
                 "rounds": args.rounds}
    sources = {"single": single, "mixture": str(mixture)}

    def run(kind: str) -> dict:
        proc = subprocess.run([sys.executable, __file__, "--child", kind, sources[kind], "--batches",
                               str(args.batches)], capture_output=True, text=True, check=True)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    got = alternate(list(sources), args.rounds, run)
    out.update(got)
    out["construct_ratio"] = within_rounds(got["mixture"], got["single"], "construct_s_median")
    out["rss_growth_mb"] = {k: spread(r["rss_after_batches_mb"] - r["rss_before_mb"] for r in got[k]) for k in sources}
    print(write_result(args.out, out))


if __name__ == "__main__":
    main()
