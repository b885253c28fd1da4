"""What one episode's segment and one sample's clip cost to make, by each way the code can make them, in one run.

    .venv/bin/python benchmarks/segment_cut.py [DATASET] [--episodes 16] [--clips 200] [--rounds 5] [--out FILE]

DATASET defaults to the H.264 bench sample (`dali-stream bench --sample h264` writes it to .demo/bench-h264).
- segment: the demuxing cut (a demuxer opened, seeking and reading, then a PyAV remux: what files the index
  does not take still get) against the indexed cut (the file's MP4 index once, one read of the episode's
  packets, `fetch/mp4write.py`), for the first camera's first `--episodes` episodes;
- clip (DALI routes, per sample): `mp4write` from the segment's sample table against a PyAV remux of the
  same packets, for `--clips` one-frame samples at random depths.
The four ways alternate, `--rounds` times (`_common.alternate`): milliseconds per item, median and range over the
rounds, and each pair's ratio within a round (what to read on a shared VM).
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
from pathlib import Path

from _common import alternate, ms_per, spread, within_rounds, write_result


def main(argv=None) -> int:
    import numpy as np

    from dali_stream.fetch.indexes import IndexCache
    from dali_stream.fetch.segments import cut_segment
    from dali_stream.graph import clips
    from dali_stream.meta.dataset import DatasetMeta
    from dali_stream.source.storage import LocalRanges

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", nargs="?", default=".demo/bench-h264")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--clips", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the four ways, alternated (default %(default)s)")
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-480p/segment_cut.json")
    args = ap.parse_args(argv)
    if not (Path(args.dataset) / "meta/info.json").exists():
        print(f"{args.dataset} has no dataset: write it with `dali-stream bench --sample h264 --no-baseline "
              "--no-limit --num-batches 1`", file=sys.stderr)
        return 2
    meta = DatasetMeta.open(args.dataset)
    key = meta.video_keys[0]
    cam = meta.cameras[key]
    ranges = LocalRanges(meta.data_fs)
    indexes = IndexCache(ranges)
    episodes = list(range(min(args.episodes, meta.num_episodes)))

    def cut(pos: int, indexed: bool):
        start = float(cam.from_timestamp[pos])
        path = meta.video_file(pos, key)
        return cut_segment(ranges if indexed else meta.data_fs, path, start, float(cam.to_timestamp[pos]),
                           episode=pos, camera=key, codec=cam.codec, tolerance_s=1e-4,
                           last_frame_s=start + (int(meta.lengths[pos]) - 1) / meta.fps,
                           indexed=indexes.get(path) if indexed else None)

    for pos in episodes:  # warm: page cache, the files' indexes, codec libraries
        cut(pos, True)
    result: dict = {"dataset": args.dataset, "camera": key, "codec": cam.codec, "python": platform.python_version(),
                    "frames_per_episode": [int(meta.lengths[p]) for p in episodes]}
    seg = cut(0, True)
    index = seg.packets()
    shown = np.sort(index.pts)
    picks = np.random.default_rng(0).integers(0, len(shown), args.clips)

    def clips_by(table) -> None:
        for f in picks:
            clips.cut_clip(seg.data, table, clips.clip_packets(table, int(shown[f]), int(shown[f])))

    ways = {"demux_and_pyav_remux_ms": (lambda: [cut(pos, False) for pos in episodes], len(episodes)),
            "index_and_mp4write_ms": (lambda: [cut(pos, True) for pos in episodes], len(episodes)),
            "clip_mp4write_ms": (lambda: clips_by(index), len(picks)),
            "clip_pyav_remux_ms": (lambda: clips_by(dataclasses.replace(index, stsd=None)), len(picks))}

    got = alternate(list(ways), args.rounds, lambda name: ms_per(*ways[name]))
    result.update({name: spread(r["ms"] for r in rs) for name, rs in got.items()})
    result["rounds"] = args.rounds
    result["demux_over_index"] = within_rounds(got["demux_and_pyav_remux_ms"], got["index_and_mp4write_ms"], "ms")
    result["clip_pyav_over_mp4write"] = within_rounds(got["clip_pyav_remux_ms"], got["clip_mp4write_ms"], "ms")
    indexes.close()
    print(write_result(args.out, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
