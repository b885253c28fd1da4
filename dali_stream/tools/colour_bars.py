"""Colour-bar clips for the colour check: saturated bars and gradients, encoded untagged or tagged (BT.709), in
limited or full range, with the codecs datasets use (`tests/decode/test_colour.py`, `make gpu-check`).

The painted ids of the sample data are grey: a route that converts YUV to RGB with another matrix than FFmpeg's
would still read every id right. These frames are made to show it: the top half holds eight bars at full
saturation (white, yellow, cyan, green, magenta, red, blue, black), the bottom half a ramp of each primary and
of grey from 0 to 255, each band 8-pixel aligned so that 4:2:0 chroma does not straddle two colours.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from ..decode.colour import rgb24

BARS = np.array([[255, 255, 255], [255, 255, 0], [0, 255, 255], [0, 255, 0], [255, 0, 255], [255, 0, 0],
                 [0, 0, 255], [0, 0, 0]], np.uint8)
GOP = 4


@dataclass(frozen=True)
class Tagging:
    """How a clip is tagged: `matrix` None (untagged, as lerobot writes) or "bt709"; `full_range`."""

    matrix: str | None
    full_range: bool

    @property
    def name(self) -> str:
        return f"{self.matrix or 'untagged'}-{'full' if self.full_range else 'limited'}"


TAGGINGS = (Tagging(None, False), Tagging("bt709", False), Tagging(None, True), Tagging("bt709", True))


def bars_frame(height: int = 128, width: int = 256, shift: int = 0) -> np.ndarray:
    """One (H, W, 3) uint8 frame: bars on top, ramps below (module doc); `shift` moves the ramps sideways."""
    frame = np.zeros((height, width, 3), np.uint8)
    top = height // 2
    bar = width // len(BARS)
    for k, colour in enumerate(BARS):
        frame[:top, k * bar:(k + 1) * bar] = colour
    ramp = ((np.arange(width) + shift) * 255 // max(1, width - 1)).clip(0, 255).astype(np.uint8)
    band = (height - top) // 4
    for k in range(4):
        rows = slice(top + k * band, top + (k + 1) * band if k < 3 else height)
        if k < 3:
            frame[rows, :, k] = ramp
        else:
            frame[rows] = ramp[:, None]
    return frame


def write_bars(path: Path, codec: str, tagging: Tagging, frames: int = 8, height: int = 128, width: int = 256,
               fps: int = 30) -> Path:
    """Encode `frames` bar frames into `path` (MP4) with `codec` as the sample writer encodes it (its encoder and
    options, `sample_encode._ENCODERS`, at a GOP of 4), tagged as `tagging` says: full range as a full-range pixel
    format for x264 and x265, as the context's colour range for the others."""
    import av

    from .sample_encode import _ENCODERS

    encoder, options_of = _ENCODERS[codec]
    path.parent.mkdir(parents=True, exist_ok=True)
    yuv = "yuvj420p" if tagging.full_range and codec in ("h264", "hevc") else "yuv420p"
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream(encoder, rate=fps, options=options_of(GOP))
        stream.width, stream.height, stream.pix_fmt = width, height, yuv
        stream.time_base = Fraction(1, fps)
        ctx = stream.codec_context
        ctx.gop_size = GOP
        ctx.color_range = 2 if tagging.full_range else 1  # JPEG / MPEG
        if tagging.matrix == "bt709":
            ctx.colorspace = ctx.color_primaries = ctx.color_trc = 1
        for k in range(frames):
            rgb = av.VideoFrame.from_ndarray(bars_frame(height, width, shift=k), format="rgb24")
            frame = rgb.reformat(format=yuv, dst_colorspace=1 if tagging.matrix == "bt709" else 5,
                                 dst_color_range=2 if tagging.full_range else 1)
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def ffmpeg_rgb(path: Path) -> np.ndarray:
    """FFmpeg's own decode of `path` to RGB, (N, H, W, 3) uint8 in presentation order: the `ffmpeg` command's
    default conversion (the stream's colour tags, untagged as FFmpeg decides), or where there is no `ffmpeg`
    command (a GPU node) PyAV's, which gives the same bytes (tests/decode/test_colour.py checks it)."""
    import shutil

    if shutil.which("ffmpeg") is None:
        return pyav_rgb(path)
    import json
    import subprocess

    probe = json.loads(subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                                       "stream=width,height", "-of", "json", str(path)],
                                      check=True, capture_output=True).stdout)["streams"][0]
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         check=True, capture_output=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, probe["height"], probe["width"], 3)


def pyav_rgb(path: Path) -> np.ndarray:
    """PyAV's decode of `path` to RGB (its FFmpeg's conversion of each frame as tagged: `decode.colour.rgb24`), in
    presentation order."""
    import av

    with av.open(str(path)) as container:
        return np.stack([rgb24(f) for f in container.decode(video=0)])
