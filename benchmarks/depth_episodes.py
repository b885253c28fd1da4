"""A depth camera under a pool: each open episode's 12-bit codes decoded once, front to back (`episode_frames_bytes`),
against from the keyframe before the first frame each batch asks (`episode_frames_bytes=0`).

    .venv/bin/python benchmarks/depth_episodes.py [--episodes 12] [--frames 90] [--height 240] [--width 320]
                                                  [--rounds 3] [--out F]

Writes a dataset of one depth camera as lerobot 0.6.1's recorder writes one (12-bit grey HEVC, lossless, each
episode encoded alone and appended: `--recorder lerobot`), then streams one epoch of it (batches of 16, lerobot's
float32 millimetres, the default pool of 16 episodes) in two configurations, alternated `--rounds` times (a new loader
each run): `per_batch` (`episode_frames_bytes=0`) and `whole` (the default bound). Reported: samples a second
(median and range over rounds), each round's ratio, and the segments decoded whole.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

from _common import alternate, spread, within_rounds, write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KEY = "observation.images.range"


def run(root: Path, config: str) -> dict:
    from dali_stream import StreamLoader

    setting = {"episode_frames_bytes": 0} if config == "per_batch" else {}
    with StreamLoader(str(root), batch_size=16, device="cpu", seed=3, **setting) as loader:
        t0, n = time.perf_counter(), 0
        for batch in loader:
            n += len(batch["index"])
        rate = n / (time.perf_counter() - t0)
        whole = (loader.stats()["episode_frames"] or {}).get("decoded_segments", 0)
    return {"samples_per_s": rate, "segments_decoded_whole": whole}


def main(argv=None) -> int:
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=12)
    p.add_argument("--frames", type=int, default=90, help="frames an episode")
    p.add_argument("--height", type=int, default=240)
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="benchmarks/results/cpu-2core-depth-episodes/result.json")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        spec = SampleSpec(episodes=args.episodes, min_length=args.frames, max_length=args.frames,
                          height=args.height, width=args.width, cameras=parse_cameras("range:depth"), seed=11,
                          recorder="lerobot")
        root = write_sample(Path(tmp) / "depth", spec)
        got = alternate(("per_batch", "whole"), args.rounds, lambda config: run(root, config))
    result = {
        "command": "python benchmarks/depth_episodes.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.node()} {platform.machine()}",
        "episodes": args.episodes, "frames_per_episode": args.frames, "size": [args.height, args.width],
        "camera": KEY, "batch_size": 16, "rounds": args.rounds,
        "configs": {c: {"samples_per_s": spread([r["samples_per_s"] for r in runs]),
                        "segments_decoded_whole": [r["segments_decoded_whole"] for r in runs]}
                    for c, runs in got.items()},
        "whole_to_per_batch": within_rounds(got["whole"], got["per_batch"], "samples_per_s"),
    }
    print(write_result(args.out, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
