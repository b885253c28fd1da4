"""What the `dali-stream` commands share: the loader settings each takes as flags, the sample writer's flags and
its run with a progress bar."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config_groups import ENGINE_SETTINGS

# The loader settings each command takes as flags (type, default and help from LoaderConfig); bench every setting that
# sizes a form of the open-decoder engine (`ENGINE_SETTINGS`).
DEMO_SETTINGS = ("batch_size", "episode_pool_size", "num_workers", "decode", "device", "tolerance_s", "frame_cache_bytes",
                 "frame_cache_dir")
BENCH_SETTINGS = ("decode", "batch_size", "num_workers", "episode_pool_size", "device", "image_dtype", "memory_format",
                  "tolerance_s", "data_files_root", "revision", "join_streams", "nvdec_engine", *ENGINE_SETTINGS,
                  "frame_cache_bytes", "frame_cache_dir", "episode_frames_bytes", "disk_cache_dir", "disk_cache_bytes",
                  "remote_concurrency", "partition", "table_cache_dir", "table_cache_bytes")

def make_sample_args(p: argparse.ArgumentParser) -> None:
    from .sample_defaults import CONTENTS, PIX_FMTS, RECORDERS
    from .sample_defaults import SAMPLE_DEFAULTS as from_spec
    p.add_argument("--num-episodes", "--episodes", dest="episodes", type=int, default=from_spec["episodes"],
                   metavar="N", help="how many episodes the sample holds (default %(default)s); a count, where "
                                     "StreamLoader's `episodes=` is a list of episode indices to use")
    p.add_argument("--min-length", type=int, default=from_spec["min_length"], help="shortest episode, frames")
    p.add_argument("--max-length", type=int, default=from_spec["max_length"], help="longest episode, frames")
    p.add_argument("--cameras", default=from_spec["cameras"],
                   help="NAME:CODEC list, codecs h264|hevc|av1|vp9, or NAME:depth for a depth camera as lerobot "
                        "records one (default %(default)s)")
    p.add_argument("--height", type=int, default=from_spec["height"])
    p.add_argument("--width", type=int, default=from_spec["width"])
    p.add_argument("--fps", type=int, default=from_spec["fps"])
    p.add_argument("--gop", type=int, default=from_spec["gop"], help="keyframe interval, frames")
    p.add_argument("--episodes-per-file", type=int, default=from_spec["episodes_per_file"],
                   help="episodes packed into one MP4 per camera")
    p.add_argument("--chunks-size", type=int, default=from_spec["chunks_size"], help="files per chunk folder")
    p.add_argument("--tasks", type=int, default=from_spec["tasks"], help="distinct task strings")
    p.add_argument("--seed", type=int, default=from_spec["seed"], help="seed of the episode lengths and scenes")
    p.add_argument("--content", choices=CONTENTS, default=from_spec["content"],
                   help="pattern: a smooth moving pattern (fast); scene: camera-like frames that compress and decode "
                        "like real robot footage (default %(default)s)")
    p.add_argument("--crf", type=int, default=from_spec["crf"],
                   help="every camera's encoder at this crf (lerobot records at 30; default: per-codec settings that "
                        "keep the painted ids readable at small sizes)")
    p.add_argument("--recorder", choices=RECORDERS, default=from_spec["recorder"],
                   help="dali_stream: one continuous stream a file; lerobot: each episode encoded alone with lerobot "
                        "0.6.1's PyAV options (use --gop 2 --crf 30 for its defaults) and appended as its recorder "
                        "does; encoder-defaults: one continuous stream a file with each encoder's own defaults (x265 "
                        "open GOPs, VP9 alt-ref and AV1 hidden frames; a camera may name another encoder: "
                        "aux:av1/libaom-av1) (default %(default)s)")
    p.add_argument("--pix-fmt", choices=PIX_FMTS, default=from_spec["pix_fmt"],
                   help="pixel format of H.264/VP9 cameras (AV1 and HEVC stay yuv420p, as lerobot keeps them)")
    p.add_argument("--state-dim", type=int, default=from_spec["state_dim"],
                   help="length of observation.state and action: members of a mixture of different embodiments "
                        "(6- and 7-dof) (default %(default)s)")
    p.add_argument("--id-offset", type=int, default=from_spec["id_offset"],
                   help="added to the painted episode id and to the state's episode entry, so the members of a mixture "
                        "tell apart which dataset a frame came from (default %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.add_argument("--workers", type=int, default=None,
                   help="processes encoding the video files (default: one per core for samples of 200M+ pixels "
                        "of video, else 1)")


def sample_spec(args: argparse.Namespace):
    from .sample_data import SampleSpec, parse_cameras

    return SampleSpec(episodes=args.episodes, min_length=args.min_length, max_length=args.max_length,
                      cameras=parse_cameras(args.cameras), height=args.height, width=args.width, fps=args.fps,
                      gop=args.gop, episodes_per_file=args.episodes_per_file, chunks_size=args.chunks_size,
                      tasks=args.tasks, seed=args.seed, content=args.content, crf=args.crf,
                      recorder=args.recorder, pix_fmt=args.pix_fmt, state_dim=args.state_dim,
                      id_offset=args.id_offset)


def write_with_progress(out: Path, spec, overwrite: bool, console, workers: int | None = None) -> Path:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from .sample_data import write_sample

    with Progress(TextColumn("[bold]writing sample dataset"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("files"), TimeElapsedColumn(), console=console, transient=False) as bar:
        task = bar.add_task("write", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return write_sample(out, spec, overwrite=overwrite, progress=progress, workers=workers)
