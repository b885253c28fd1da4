"""One camera file of a transcode (`tools.transcode`): its frames decoded (PyAV, any codec FFmpeg reads) and encoded
again for NVDEC's random access, every frame at its own presentation time, then checked against the source.

The encoding: H.264 (libx264, or h264_nvenc) or HEVC (libx265, or hevc_nvenc), yuv420p, a keyframe every `gop`
frames exactly (no scene-cut keyframes), no B-frames (a frame's decode never waits for a later one), the source's
time base, each frame's pts as the source's: an episode's frames keep the timestamps `meta/episodes` points at.
MP4 with its index first (`faststart`): a reader's first request finds it.

The check, after the file is written under a temporary name of the writing process's own (`<name>.<pid>.partial`): the new file decoded and the source decoded again in
step, frame by frame: the same number of frames, each at the same time (to the microsecond), and the PSNR of its
RGB pixels against the source's (8-bit, over the three channels), summed per episode by the episode's time span.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterator

import numpy as np

# codec -> CPU encoder, its NVENC peer, and the options of each (`gop`: frames a keyframe; `crf`: quality)
ENCODERS = {"h264": ("libx264", "h264_nvenc"), "hevc": ("libx265", "hevc_nvenc")}
DEFAULT_QUALITY = {"h264": 18, "hevc": 20}  # crf (x264/x265) or cq (NVENC): visually lossless for robot cameras
TIME_SLACK_S = 1e-6  # a new frame's time against the source's


def encoder_options(name: str, gop: int, quality: int, threads: int) -> dict[str, str]:
    """The options of encoder `name` for a keyframe every `gop` frames, no B-frames, at `quality`."""
    if name == "libx264":
        return {"preset": "fast", "crf": str(quality), "bf": "0", "g": str(gop), "threads": str(threads),
                "x264-params": f"scenecut=0:keyint={gop}:min-keyint={gop}"}
    if name == "libx265":
        return {"preset": "fast", "crf": str(quality),
                "x265-params": f"log-level=error:scenecut=0:keyint={gop}:min-keyint={gop}:bframes=0:open-gop=0:"
                               f"pools={threads}"}
    # NVENC: constant quality, no B-frames, a fixed GOP
    return {"preset": "p4", "rc": "vbr", "cq": str(quality), "b": "0", "bf": "0", "g": str(gop),
            "forced-idr": "1"}


@dataclass(frozen=True)
class Unit:
    """One camera file to transcode: `source` in `fs` to `target` (a local path), with the time span of each
    episode it holds (episode index -> [from, to) seconds)."""

    camera: str
    source: str
    target: str
    episodes: dict[int, tuple[float, float]]
    frames: int  # frames the episodes table says it holds


def _frames(container) -> Iterator[Any]:
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    for frame in container.decode(stream):
        yield frame


def partial_name(target: Any) -> str:
    """Where `target` is written until it is complete: a name of the writing process's own, whoever else writes it."""
    return f"{target}.{os.getpid()}.partial"


@functools.lru_cache(maxsize=4)
def data_fs(dataset: str) -> Any:
    """The file system `dataset`'s data/ and videos/ are read through, opened once a process (a remote one holds
    locks and connections: it does not travel to the encoding processes)."""
    from dali_stream import open_meta

    return open_meta(dataset).data_fs


def transcode_unit(dataset: str, unit: Unit, codec: str, encoder: str, gop: int, quality: int,
                   threads: int = 1) -> dict:
    """Write `unit.target` (through a partial name, renamed once checked) and return its report: frames, bytes,
    PSNR mean and worst per episode and over the file. `dataset`: the source as the command was given it (its files
    are read through `data_fs`). Raises ValueError where a frame has no time or the new file does not hold the
    source's frames at their times."""
    import av

    fs = data_fs(dataset)
    partial = partial_name(unit.target)
    os.makedirs(os.path.dirname(unit.target), exist_ok=True)
    with fs.open(unit.source, "rb") as raw, av.open(raw) as src:
        stream_in = src.streams.video[0]
        time_base = stream_in.time_base
        rate = stream_in.average_rate or Fraction(30)
        with av.open(partial, "w", format="mp4", options={"movflags": "+faststart"}) as out:
            stream = out.add_stream(encoder, rate=rate, options=encoder_options(encoder, gop, quality, threads))
            stream.width, stream.height = stream_in.codec_context.width, stream_in.codec_context.height
            stream.pix_fmt = "yuv420p"
            stream.time_base = time_base
            stream.codec_context.time_base = time_base
            stream.codec_context.gop_size = gop
            count = 0
            for frame in _frames(src):
                if frame.pts is None:
                    raise ValueError(f"{unit.source}: frame {count} has no presentation time; the file cannot be "
                                     "transcoded with its timestamps kept (run `dali-stream verify` on it)")
                new = frame.reformat(format="yuv420p")
                new.pts, new.time_base = frame.pts, time_base
                new.pict_type = av.video.frame.PictureType.NONE  # the source's keyframes do not force ours
                out.mux(stream.encode(new))
                count += 1
            out.mux(stream.encode(None))
    report = check(fs, unit, partial)
    report["bytes"], report["source_bytes"] = os.path.getsize(partial), fs.size(unit.source)
    os.replace(partial, unit.target)
    return report


def die_with_parent() -> None:
    """A transcode process's start: it ends the moment the command's process does (killed: a process left encoding
    would go on writing into DST beside the run that continues it). Linux's parent-death signal, else a watch."""
    import ctypes
    import signal
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's to handle
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent went before the signal was set
            os._exit(1)
        return
    except (AttributeError, OSError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR of two uint8 pictures in dB (100 for identical ones)."""
    mse = float(np.mean((a.astype(np.int32) - b.astype(np.int32)) ** 2))
    return 100.0 if mse == 0 else min(100.0, 10 * math.log10(255.0 ** 2 / mse))


def check(fs: Any, unit: Unit, written: str) -> dict:
    """Decode `written` and the source in step: the same frames at the same times; PSNR per frame, per episode."""
    import av

    per_episode: dict[int, list[float]] = {}
    spans = sorted(unit.episodes.items(), key=lambda e: e[1][0])
    frames = 0
    with fs.open(unit.source, "rb") as raw, av.open(raw) as src, av.open(written) as new:
        for old, got in zip_longest_checked(_frames(src), _frames(new), unit.source, written):
            t_old, t_new = float(old.pts * old.time_base), float(got.pts * got.time_base)
            if abs(t_old - t_new) > TIME_SLACK_S:
                raise ValueError(f"{written}: frame {frames} shows at {t_new:.6f} s, the source's at {t_old:.6f} s")
            value = psnr(old.to_ndarray(format="rgb24"), got.to_ndarray(format="rgb24"))
            episode = next((e for e, (lo, hi) in spans if lo - 1e-4 <= t_old < hi - 1e-4), None)
            per_episode.setdefault(-1 if episode is None else episode, []).append(value)
            frames += 1
    if frames != unit.frames:
        raise ValueError(f"{unit.source}: {frames} frames decoded where the episodes table counts {unit.frames}")
    every = [v for values in per_episode.values() for v in values]
    return {"camera": unit.camera, "source": unit.source, "frames": frames,
            "psnr_mean": float(np.mean(every)) if every else None, "psnr_worst": min(every) if every else None,
            "episodes": {str(e): {"frames": len(v), "psnr_mean": float(np.mean(v)), "psnr_worst": min(v)}
                         for e, v in sorted(per_episode.items())}}


def zip_longest_checked(a: Iterator[Any], b: Iterator[Any], source: str, written: str) -> Iterator[tuple[Any, Any]]:
    """Pairs of `a` and `b`; a ValueError where one ends before the other."""
    n = 0
    for x in a:
        y = next(b, None)
        if y is None:
            raise ValueError(f"{written} holds {n} frames, fewer than {source}")
        yield x, y
        n += 1
    if next(b, None) is not None:
        raise ValueError(f"{written} holds more frames than {source} ({n})")
