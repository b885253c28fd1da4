"""The sample writer's `recorder="encoder-defaults"`: each video file one continuous encode with the encoder's own
defaults, as recordings made outside lerobot come (ffmpeg command lines, ROS bag exporters): only the GOP
(`-g`), the crf when given and the pixel format are set. What the defaults bring, and the loader must read
right:
- libx264: B-frames (3, adaptive), a long GOP when `gop` is long;
- libx265: open GOPs, keyframes are CRA pictures followed by RASL pictures that are shown before them;
- libvpx-vp9: two passes at the `good` deadline, as VP9 is published (libvpx makes alt-ref frames, decoded but
  not shown and packed with a shown frame in one superframe, only with a first pass's statistics);
- libsvtav1 and libaom-av1: hidden frames shown later through `show_existing_frame`.

The encoders PyAV's FFmpeg has are driven through PyAV; the others (libaom-av1: PyAV's wheels leave it out)
and two-pass VP9 through the `ffmpeg` command-line tool, the frames piped as raw RGB. libaom runs at `cpu-used=8` and SVT-AV1 at
its default preset: speed settings only, the frame structure is the library's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Iterable

import numpy as np

from ..errors import InstallError

ENCODERS = {"h264": "libx264", "hevc": "libx265", "vp9": "libvpx-vp9", "av1": "libsvtav1"}  # per codec, by default
EXTRA = {"av1": ("libaom-av1",)}  # other encoders a camera may name (`NAME:CODEC/ENCODER`)
SPEED = {"libaom-av1": {"cpu-used": "8"}}  # speed only: libaom's default (1) takes minutes for a test file
QUIET = {"libx265": {"x265-params": "log-level=error"}}
CAREFUL = {"libsvtav1": {"preset": "6"}}  # with a lower crf, for a file whose painted ids did not survive
TWO_PASS = frozenset({"libvpx-vp9"})


def encoders_of(codec: str) -> tuple[str, ...]:
    return (ENCODERS[codec], *EXTRA.get(codec, ()))


def encode(path: Path, frames: Iterable[np.ndarray], encoder: str, fps: int, gop: int, crf: int | None,
           pix_fmt: str, height: int, width: int, careful: bool = False) -> None:
    """Encode RGB frames into one MP4 stream with `encoder`'s defaults, frame k at pts k/fps."""
    import av

    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only
    options = {"g": str(gop), **SPEED.get(encoder, {}), **QUIET.get(encoder, {})}
    if careful:
        options.update(CAREFUL.get(encoder, {}))
        crf = 12
    if crf is not None:
        options["crf"] = str(crf)
    path.parent.mkdir(parents=True, exist_ok=True)
    if encoder in TWO_PASS or encoder not in av.codecs_available:
        _encode_with_ffmpeg(path, frames, encoder, fps, options, pix_fmt, height, width, encoder in TWO_PASS)
        return
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream(encoder, rate=fps, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        stream.time_base = Fraction(1, fps)
        for k, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def _encode_with_ffmpeg(path: Path, frames: Iterable[np.ndarray], encoder: str, fps: int, options: dict[str, str],
                        pix_fmt: str, height: int, width: int, two_pass: bool) -> None:
    tool = shutil.which("ffmpeg")
    if tool is None or encoder not in ffmpeg_encoders(tool):
        where = "no ffmpeg command is on PATH" if tool is None else f"{tool} lacks it"
        why = "is encoded in two passes" if two_pass else "is not in PyAV's FFmpeg"
        raise InstallError(f"encoder {encoder!r} {why}, through the ffmpeg command, and {where}: install an FFmpeg "
                           "built with it (Debian: apt-get install -y ffmpeg), or give the camera another codec")
    args = [tool, "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
            "-s", f"{width}x{height}", "-r", str(fps), "-i", "-", "-c:v", encoder, "-pix_fmt", pix_fmt]
    for key, value in options.items():
        args += [f"-{key}", value]
    frames = list(frames) if two_pass else frames  # fed twice
    with tempfile.TemporaryDirectory() as tmp:
        log = ["-passlogfile", str(Path(tmp) / "pass")]
        runs = [[*args, *log, "-pass", "1", "-f", "null", os.devnull], [*args, *log, "-pass", "2", "-f", "mp4", str(path)]] \
            if two_pass else [[*args, "-f", "mp4", str(path)]]
        for run in runs:
            _pipe(run, frames)


def _pipe(args: list[str], frames: Iterable[np.ndarray]) -> None:
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stderr=err)
        assert proc.stdin is not None
        try:
            for rgb in frames:
                proc.stdin.write(np.ascontiguousarray(rgb, dtype=np.uint8).tobytes())
        except BrokenPipeError:
            pass
        finally:
            proc.stdin.close()
        if proc.wait() != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(args)}: exit {proc.returncode}: "
                               f"{err.read().decode(errors='replace').strip()[-600:]}")


def ffmpeg_encoders(tool: str = "ffmpeg") -> set[str]:
    """The video encoders the `ffmpeg` command offers (empty when it does not run)."""
    try:
        out = subprocess.run([tool, "-hide_banner", "-encoders"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return {line.split()[1] for line in out.splitlines() if line.strip().startswith("V") and len(line.split()) > 1}
