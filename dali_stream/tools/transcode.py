"""`dali-stream transcode SRC DST`: a LeRobot v3 dataset whose cameras NVDEC cannot decode (AV1, lerobot's default,
on A100/H100/H200) written again with those cameras in H.264 or HEVC, once, for the GPU nodes that train on it.

    dali-stream transcode lerobot/aloha_sim_insertion_human .demo/aloha-h264
    dali-stream transcode SRC DST --codec hevc --gop 8 --quality 20 --cameras observation.images.top

SRC is anything the loader reads (a folder, a Hub id, an hf://, s3:// or https:// URL); DST a local folder, a
LeRobot v3 dataset lerobot reads as it reads SRC: data/ and meta/ copied byte for byte but meta/info.json (the
cameras' codec), every episode's frames at their timestamps (`tools.transcode_video`), the chunk/file layout kept.
Cameras already in H.264 or HEVC, and depth cameras, are copied as they are.

Quality: per camera the PSNR of the new frames against the source's decoded frames, per episode and over the camera
(mean and worst frame), written to `transcode_report.json` in DST and printed; an episode whose mean is below
`--psnr-floor` (40 dB by default: a re-encode at that level differs from its source by less than the source's own
compression error does) fails the run, naming the camera and the episode.

Safe to stop: every file is written under a `.partial` name of its writing process's and renamed once complete (checked, for the videos), and
`meta/info.json` comes last, so a DST never holds a partial file under a final name and a DST with info.json is
whole. The same command again continues where a run stopped (`.transcode.json` in DST says what it is a transcode
of: another SRC or other settings are refused, as is a folder that holds something else).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import posixpath
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from fractions import Fraction
from pathlib import Path
from typing import Any, BinaryIO, Callable

from ..errors import ConfigError
from ..meta.dataset import EPISODES_GLOB
from .transcode_video import DEFAULT_QUALITY, ENCODERS, Unit, die_with_parent, partial_name, transcode_unit

MANIFEST = ".transcode.json"  # in DST: what it is a transcode of, and the units done
REPORT = "transcode_report.json"
NVDEC_CODECS = ("h264", "hevc")  # what every NVDEC since Maxwell decodes (AV1 only from Ampere's consumer parts on)
DEFAULT_GOP = 2  # lerobot's own recorder's: random access decodes at most 2 frames (docs/transcode.md)
DEFAULT_FLOOR_DB = 40.0
SIZE_RATIO = 4.0  # a transcoded camera's bytes at most this many times its source's, for the free-space check


def nvdec_hint(source: str, codecs: dict[str, str], gpu: Any = None) -> str | None:
    """What `inspect` and `diagnose` say where cameras are in a codec NVDEC cannot decode (`codecs`: camera ->
    codec, depth cameras and images left out): on this node's GPU where there is one (`gpu`: `decode.gpus.GpuCaps`),
    else on A100/H100/H200. None where every camera decodes on NVDEC there."""
    if gpu is not None:
        other = {k: c for k, c in codecs.items() if not gpu.decodes(c)}
        where = f"this node's {gpu.name} has no NVDEC for them, so they decode on the CPU here"
    else:
        other = {k: c for k, c in codecs.items() if c not in NVDEC_CODECS}
        where = ("NVDEC on A100, H100 and H200 cannot decode them (L4, L40S and newer decode AV1), so they decode on "
                 "the CPU there")
    if not other:
        return None
    named = ", ".join(f"{k} ({c})" for k, c in other.items())
    return (f"cameras {named}: {where}; `dali-stream transcode {source} DST` writes the dataset once with them in "
            "H.264 (docs/transcode.md)")


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="dali-stream transcode", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="the dataset to read: a folder, a Hub id, or an hf://, s3:// or https:// URL")
    ap.add_argument("dest", help="the local folder to write (new, or a run of this same command to continue)")
    ap.add_argument("--codec", choices=NVDEC_CODECS, default="h264", help="the cameras' new codec (default h264)")
    ap.add_argument("--gop", type=int, default=DEFAULT_GOP,
                    help="frames from one keyframe to the next: a random sample decodes half of it on average "
                         "(default %(default)s; docs/transcode.md says why)")
    ap.add_argument("--quality", type=int, default=None,
                    help="crf (x264/x265) or cq (NVENC), lower is better (default: h264 18, hevc 20)")
    ap.add_argument("--encoder", choices=("auto", "nvenc", "cpu"), default="auto",
                    help="nvenc: the GPU's encoder; cpu: libx264/libx265; auto: nvenc where it opens, else cpu")
    ap.add_argument("--cameras", default=None, help="comma-separated camera keys to transcode (default: every camera "
                                                    "in a codec other than H.264/HEVC)")
    ap.add_argument("--psnr-floor", type=float, default=DEFAULT_FLOOR_DB,
                    help="fail where an episode's mean PSNR falls below this, in dB (default %(default)s)")
    ap.add_argument("--workers", type=int, default=None, help="camera files encoded at once (default: the cores)")
    args = ap.parse_args(argv)
    if args.gop < 1:
        raise ConfigError(f"--gop must be at least 1 (a keyframe every frame). Found: {args.gop}")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1. Found: {args.workers}")
    if args.quality is None:
        args.quality = DEFAULT_QUALITY[args.codec]
    return args


def choose_encoder(codec: str, wanted: str) -> str:
    """The encoder `--encoder` asks for: NVENC where it opens (`auto`), else the CPU's."""
    cpu, nvenc = ENCODERS[codec]
    if wanted == "cpu":
        return cpu
    try:
        import av

        ctx = av.CodecContext.create(nvenc, "w")
        ctx.width, ctx.height, ctx.pix_fmt = 256, 256, "yuv420p"
        ctx.time_base = Fraction(1, 30)
        ctx.open()
        return nvenc
    except Exception as exc:  # no GPU, no driver, or an FFmpeg without it
        if wanted == "nvenc":
            raise ConfigError(f"--encoder nvenc: {nvenc} does not open on this node ({exc}); run on a node with an "
                              f"NVIDIA GPU and driver, or pass --encoder cpu ({cpu})") from None
        return cpu


def plan(meta: Any, dest: Path, args: argparse.Namespace) -> tuple[list[Unit], list[tuple[Any, str, str]], list[str]]:
    """(camera files to transcode, files to copy as they are (`dataset_files`), cameras transcoded)."""
    cameras = [k for k in meta.video_keys if meta.cameras[k].depth is None]
    if args.cameras:
        wanted = [c.strip() for c in args.cameras.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in meta.video_keys]
        if unknown:
            raise ConfigError(f"--cameras {unknown} are not cameras of {meta.source!r}; its cameras: {meta.video_keys}")
        depth = [c for c in wanted if meta.cameras[c].depth is not None]
        if depth:
            raise ConfigError(f"--cameras {depth} are depth cameras: their codes are copied as recorded; leave them out")
        cameras = wanted
    else:
        cameras = [k for k in cameras if meta.cameras[k].codec not in NVDEC_CODECS]
    units: dict[str, Unit] = {}
    for key in cameras:
        cam = meta.cameras[key]
        for pos in range(meta.num_episodes):
            source = meta.video_file(pos, key)
            rel = posixpath.relpath(source, meta.data_root)
            unit = units.get(rel)
            spans = dict(unit.episodes) if unit else {}
            spans[int(meta.episodes["episode_index"][pos])] = (float(cam.from_timestamp[pos]),
                                                               float(cam.to_timestamp[pos]))
            frames = (unit.frames if unit else 0) + int(meta.lengths[pos])
            units[rel] = Unit(key, source, str(dest / rel), spans, frames)
    return list(units.values()), dataset_files(meta, cameras), cameras


def dataset_files(meta: Any, transcoded: list[str]) -> list[tuple[Any, str, str]]:
    """(file system, path, path under DST) of each file the dataset is made of but meta/info.json and the transcoded
    cameras' videos: meta/ (stats, tasks, the episodes tables), the README (a Hub dataset's card), data/ and the
    other cameras' videos as the episodes table names them."""
    out = []
    for rel in ("meta/stats.json", "meta/tasks.parquet", "README.md"):
        path = posixpath.join(meta.root, rel)
        if meta.fs.exists(path):
            out.append((meta.fs, path, rel))
    for path in sorted(meta.fs.glob(posixpath.join(meta.root, EPISODES_GLOB))):
        out.append((meta.fs, path, posixpath.relpath(path, meta.root)))
    named = {meta.data_file(p) for p in range(meta.num_episodes)}
    named |= {meta.video_file(p, k) for k in meta.video_keys if k not in transcoded for p in range(meta.num_episodes)}
    out += [(meta.data_fs, path, posixpath.relpath(path, meta.data_root)) for path in sorted(named)]
    return out


def identity(meta: Any, args: argparse.Namespace, cameras: list[str]) -> dict:
    """What DST is a transcode of: the source, its info.json's hash, the settings that shape the new files."""
    info = json.dumps(meta.info, sort_keys=True).encode()
    return {"source": str(args.source), "source_info_sha256": hashlib.sha256(info).hexdigest(), "codec": args.codec,
            "gop": args.gop, "quality": args.quality, "cameras": cameras}


def open_dest(dest: Path, wanted: dict) -> dict:
    """The manifest of DST: a new one for a new or empty folder (written by `start_dest` once the drive is known to
    have room), the one there for a run of the same transcode; else ConfigError saying what differs."""
    manifest = dest / MANIFEST
    if manifest.exists():
        have = json.loads(manifest.read_text())
        differ = sorted(k for k in wanted if have.get("of", {}).get(k) != wanted[k])
        if differ:
            raise ConfigError(f"{dest} is a transcode of another source or with other settings ({', '.join(differ)}: "
                              f"{ {k: have.get('of', {}).get(k) for k in differ} } there, "
                              f"{ {k: wanted[k] for k in differ} } now); pass a new DST, or the same settings to "
                              "continue it")
        return have
    if dest.exists() and any(dest.iterdir()):
        raise ConfigError(f"{dest} exists and holds files that are not a transcode (no {MANIFEST} there); pass a new "
                          "or empty folder as DST")
    return {"of": wanted, "done": {}}


def start_dest(dest: Path, manifest: dict) -> None:
    """DST made and its manifest written, where this is the transcode's first run."""
    if not (dest / MANIFEST).exists():
        dest.mkdir(parents=True, exist_ok=True)
        write_atomic(dest / MANIFEST, json.dumps(manifest, indent=1).encode())


def land(target: Path, write: Callable[[BinaryIO], object]) -> None:
    """`target` written by `write(file)` under its partial name (`partial_name`), then renamed into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_name(target)
    with open(partial, "wb") as out:
        write(out)
    os.replace(partial, target)


def write_atomic(path: Path, data: bytes) -> None:
    land(path, lambda out: out.write(data))


def copy(fs: Any, source: str, target: Path) -> None:
    with fs.open(source, "rb") as src:
        land(target, lambda out: shutil.copyfileobj(src, out, 1 << 20))


def check_space(meta: Any, dest: Path, units: list[Unit], copies: list[tuple[Any, str, str]]) -> None:
    """Refuse before any work where DST's drive cannot hold the copies and the new cameras (at most SIZE_RATIO
    times their source's bytes)."""
    need = sum(fs.size(path) for fs, path, rel in copies if not (dest / rel).exists())
    need += int(SIZE_RATIO * sum(meta.data_fs.size(u.source) for u in units if not Path(u.target).exists()))
    drive = next(p for p in (dest, *dest.parents) if p.exists())  # DST itself may not exist yet
    free = shutil.disk_usage(drive).free
    if need > free:
        raise ConfigError(f"{dest}: {free / 2**30:.1f} GiB free, and this transcode may write up to "
                          f"{need / 2**30:.1f} GiB (the copies, and up to {SIZE_RATIO:g}x the cameras' bytes); free "
                          "space there or pass another DST")


def updated_info(info: dict, cameras: list[str], codec: str) -> dict:
    """meta/info.json with the transcoded cameras' codec and pixel format."""
    out = json.loads(json.dumps(info))
    for key in cameras:
        video = out["features"][key].setdefault("info", {})
        video["video.codec"], video["video.pix_fmt"] = codec, "yuv420p"
    return out


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from dali_stream import open_meta

    args = parse(argv)
    console = Console(stderr=True)
    meta = open_meta(args.source)
    if not hasattr(meta, "cameras"):
        raise ConfigError(f"{args.source}: a mixture; transcode takes one dataset at a time (each member's root)")
    dest = Path(args.dest)
    units, copies, cameras = plan(meta, dest, args)
    if not cameras:
        console.print(f"{args.source}: every camera is in {' or '.join(NVDEC_CODECS)} already (or a depth camera): "
                      "NVDEC decodes it as it is; nothing to transcode")
        return 0
    manifest = open_dest(dest, identity(meta, args, cameras))
    if (dest / "meta/info.json").exists():
        console.print(f"{dest} is this transcode of {args.source}, complete: nothing to do")
        return 0
    check_space(meta, dest, units, copies)
    encoder = choose_encoder(args.codec, args.encoder)
    start_dest(dest, manifest)
    workers = args.workers or max(1, os.cpu_count() or 1)
    todo = [u for u in units if done_key(dest, u) not in manifest["done"] or not Path(u.target).exists()]
    console.print(f"transcoding {len(cameras)} camera(s) of {args.source} to {args.codec} with {encoder} "
                  f"(GOP {args.gop}, quality {args.quality}): {len(todo)} of {len(units)} files left, "
                  f"{workers} at once")
    t0 = time.perf_counter()
    for fs, path, rel in copies:  # tables and metadata first: byte for byte
        if not (dest / rel).exists():
            copy(fs, path, dest / rel)
    columns = (TextColumn("[bold]transcoding"), BarColumn(), MofNCompleteColumn(), TextColumn("frames"),
               TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[now]}"))
    for stale in dest.rglob("*.partial"):  # a killed run's (its processes ended with it)
        stale.unlink()
    with Progress(*columns, console=console) as bar, \
            ProcessPoolExecutor(workers, initializer=die_with_parent) as pool:
        task = bar.add_task("frames", total=sum(u.frames for u in todo), now="")
        threads = max(1, (os.cpu_count() or 1) // workers)
        futures = {pool.submit(transcode_unit, args.source, u, args.codec, encoder, args.gop, args.quality, threads): u
                   for u in todo}
        for fut in as_completed(futures):
            unit = futures[fut]
            report = fut.result()
            manifest["done"][done_key(dest, unit)] = report
            write_atomic(dest / MANIFEST, json.dumps(manifest, indent=1).encode())
            bar.update(task, advance=unit.frames, now=f"{unit.camera} {Path(unit.target).name}")
    report = summary(manifest, cameras, args, encoder, time.perf_counter() - t0)
    write_atomic(dest / REPORT, json.dumps(report, indent=1).encode())
    for key, cam in report["cameras"].items():
        console.print(f"{key}: PSNR mean {cam['psnr_mean']:.1f} dB, worst frame {cam['psnr_worst']:.1f} dB, "
                      f"{cam['bytes'] / 2**20:.1f} MiB ({cam['size_ratio']:.2f}x the source)")
    low = [(k, e, v) for k, cam in report["cameras"].items() for e, v in cam["episodes"].items()
           if v["psnr_mean"] < args.psnr_floor]
    if low:
        key, episode, v = min(low, key=lambda x: x[2]["psnr_mean"])
        raise ConfigError(f"camera {key!r} episode {episode}: mean PSNR {v['psnr_mean']:.1f} dB is below "
                          f"--psnr-floor {args.psnr_floor:g} ({len(low)} episode(s) in all, {REPORT} lists them); "
                          f"lower --quality (now {args.quality}) and run again into a new DST, or lower the floor")
    write_atomic(dest / "meta/info.json", json.dumps(updated_info(meta.info, cameras, args.codec), indent=4).encode())
    console.print(f"wrote {dest}: a LeRobot v3 dataset with {', '.join(cameras)} in {args.codec}; the report: "
                  f"{dest / REPORT}")
    return 0


def done_key(dest: Path, unit: Unit) -> str:
    """A unit's name in the manifest: its file's path under DST."""
    return os.path.relpath(unit.target, dest)


def summary(manifest: dict, cameras: list[str], args: argparse.Namespace, encoder: str, seconds: float) -> dict:
    """The report: per camera its frames, bytes against the source's, PSNR mean and worst, per episode."""
    out: dict = {"source": str(args.source), "codec": args.codec, "encoder": encoder, "gop": args.gop,
                 "quality": args.quality, "psnr_floor_db": args.psnr_floor, "seconds_this_run": round(seconds, 1),
                 "cameras": {}}
    for key in cameras:
        files = [r for r in manifest["done"].values() if r["camera"] == key]
        frames = sum(r["frames"] for r in files)
        episodes = {e: v for r in files for e, v in r["episodes"].items()}
        source_bytes = sum(r["source_bytes"] for r in files)
        out["cameras"][key] = {
            "files": len(files), "frames": frames, "bytes": sum(r["bytes"] for r in files),
            "size_ratio": sum(r["bytes"] for r in files) / max(1, source_bytes),
            "psnr_mean": sum(r["psnr_mean"] * r["frames"] for r in files) / max(1, frames),
            "psnr_worst": min(r["psnr_worst"] for r in files), "episodes": episodes}
    return out


if __name__ == "__main__":
    sys.exit(main())
