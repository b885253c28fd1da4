"""Video files written the way lerobot 0.6.1's recorder writes them: the sample writer's `recorder="lerobot"`.

lerobot encodes each episode alone through PyAV (`add_stream(vcodec, fps, options={"g": g, "crf": crf})`,
the encoder's own defaults otherwise: libx264 and libx265 with B-frames, SVT-AV1), then appends it to the
camera's current file by remuxing the file and the episode through FFmpeg's concat demuxer
(`concatenate_video_files`). An episode's `from_timestamp` is the file's duration before the append and its
`to_timestamp` that plus the episode file's duration. So every episode starts on a keyframe, a B-frame stream's
next episode starts one or two frames of dts before this one's end, and HEVC's durations are not whole frames:
the layouts that broke the loader at episode ends, which one continuously encoded file never shows.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

import numpy as np

from ..errors import InstallError
from ..meta.depth import PIX_FMT, DepthCoding

# lerobot's `vcodec` names (PyAV picks the default encoder of each: libx264, libx265); VP9 is not one of lerobot's
# codecs, so its camera gets libvpx-vp9 with the same two options.
VCODECS = {"h264": "h264", "hevc": "hevc", "av1": "libsvtav1", "vp9": "libvpx-vp9"}
LEROBOT_GOP = 2
LEROBOT_CRF = 30
DEPTH_CODING = DepthCoding(unit="mm")  # lerobot's depth quantiser defaults, depth recorded in millimetres


# What a careful encode (the sample writer's second try, where a frame lost its painted ids) changes beyond a lower
# crf: SVT-AV1 without its temporal filter (it blends neighbouring frames' painted ids) and at crf 4, which the
# release PyAV 15 bundles (lerobot 0.6.1's) needs at 96x128 to keep the ids of the picture after each keyframe.
# lerobot's structure (g, B-frames) stays.
CAREFUL = {"av1": {"crf": "4", "svtav1-params": "enable-tf=0"}}


def encode_episode(path: Path, frames: Iterable[np.ndarray], codec: str, fps: int, gop: int, crf: int,
                   pix_fmt: str, height: int, width: int, careful: bool = False) -> None:
    """One episode's RGB frames as lerobot's `encode_video_frames` writes them (`careful`: with `CAREFUL`)."""
    import av

    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only
    options = {"g": str(gop), "crf": str(crf), **(CAREFUL.get(codec, {}) if careful else {})}
    if codec == "hevc":
        options["x265-params"] = "log-level=error"  # quiet only: lerobot's encoder settings are unchanged
    with av.open(str(path), "w") as out:
        stream = out.add_stream(VCODECS[codec], fps, options=options)
        stream.pix_fmt, stream.width, stream.height = pix_fmt, width, height
        for rgb in frames:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        out.mux(stream.encode())


def depth_info(height: int, width: int, fps: int, gop: int) -> dict[str, object]:
    """A depth camera's feature `info` as lerobot 0.6.1 writes it (its encoder's and quantiser's settings)."""
    q = DEPTH_CODING
    return {"is_depth_map": True, "depth_unit": q.unit, "video.height": height, "video.width": width,
            "video.codec": "hevc", "video.pix_fmt": PIX_FMT, "video.fps": fps, "video.channels": 1, "has_audio": False,
            "video.g": gop, "video.extra_options": {"x265-params": "lossless=1"}, "video.depth_min": q.depth_min,
            "video.depth_max": q.depth_max, "video.shift": q.shift, "video.use_log": q.use_log}


def stats_values(frames: np.ndarray, depth: bool) -> np.ndarray:
    """(pixels, channels) values a camera's stats are taken over, as lerobot takes them: RGB frames (N, H, W, 3) in
    [0, 1]; a depth camera's codes (N, H, W) as the depth they stand for in millimetres (`DEPTH_CODING`)."""
    if not depth:
        return frames.reshape(-1, 3).astype(np.float64) / 255.0
    mm = np.empty(frames.shape, np.float32)
    DEPTH_CODING.write(frames, mm, "mm")
    return mm.reshape(-1, 1).astype(np.float64)


def encode_depth(path: Path, planes: Iterable[np.ndarray], fps: int, gop: int) -> None:
    """One episode's depth codes ((H, W) uint16, 12 bits) as lerobot's depth encoder writes them (its
    `DepthEncoderConfig` defaults: HEVC, gray12le, g, crf 30 and x265's lossless mode)."""
    import av

    options = {"g": str(gop), "crf": str(LEROBOT_CRF), "x265-params": "lossless=1:log-level=error"}
    with av.open(str(path), "w") as out:
        stream = None
        for codes in planes:
            if stream is None:
                stream = out.add_stream(VCODECS["hevc"], fps, options=options)
                stream.pix_fmt, stream.height, stream.width = PIX_FMT, *codes.shape
            frame = av.VideoFrame(codes.shape[1], codes.shape[0], PIX_FMT)  # from_ndarray takes gray12le from PyAV 15
            rows = np.zeros((codes.shape[0], frame.planes[0].line_size // 2), "<u2")
            rows[:, :codes.shape[1]] = codes
            frame.planes[0].update(rows.tobytes())
            out.mux(stream.encode(frame))
        if stream is not None:
            out.mux(stream.encode())


def duration_s(path: Path) -> float:
    """A video file's duration as lerobot's `get_video_duration_in_s` reads it: the stream's, else the file's."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if stream.duration is not None:
            return float(stream.duration * stream.time_base)
        return float(container.duration / av.time_base)


def append_episode(file: Path, episode: Path) -> None:
    """`file` followed by `episode`, remuxed through FFmpeg's concat demuxer as lerobot appends an episode."""
    import av

    with tempfile.TemporaryDirectory(dir=file.parent) as tmp:
        listing = Path(tmp) / "list.ffconcat"
        listing.write_text("ffconcat version 1.0\n" + "".join(f"file '{p.resolve()}'\n" for p in (file, episode)))
        joined = Path(tmp) / "joined.mp4"
        with av.open(str(listing), "r", format="concat", options={"safe": "0"}) as src, \
                av.open(str(joined), "w", options={"movflags": "faststart"}) as dst:
            video = src.streams.video[0]
            out = dst.add_stream_from_template(template=video, opaque=True)
            try:
                out.time_base = video.time_base
            except RuntimeError as exc:  # PyAV 14 sets it on the copy's decoder context and refuses
                raise InstallError(
                    f"recorder='lerobot' remuxes as lerobot does, which needs a newer PyAV than {av.__version__} "
                    f"(it cannot set the time base of a copied stream: {exc}; tested with PyAV 18.1): "
                    "pip install -U av, or write the sample with recorder='dali_stream'") from None
            for packet in src.demux(video):
                if packet.dts is None:
                    continue
                packet.stream = out
                dst.mux(packet)
        shutil.move(str(joined), str(file))


def write_file(path: Path, episodes: list[Iterable[np.ndarray]], codec: str, fps: int, gop: int, crf: int,
               pix_fmt: str, height: int, width: int, depth: bool = False,
               careful: bool = False) -> list[tuple[float, float]]:
    """Record `episodes` (each an iterable of RGB frames; of depth codes where `depth`, `encode_depth`) into one
    packed file at `path`, as lerobot does (`careful`: `encode_episode`'s); returns each episode's
    (from_timestamp, to_timestamp)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    spans = []
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        for n, frames in enumerate(episodes):
            episode = Path(tmp) / f"episode-{n}.mp4"
            if depth:
                encode_depth(episode, frames, fps, gop)
            else:
                encode_episode(episode, frames, codec, fps, gop, crf, pix_fmt, height, width, careful)
            length = duration_s(episode)
            if n == 0:
                shutil.move(str(episode), str(path))
                start = 0.0
            else:
                start = duration_s(path)
                append_episode(path, episode)
            spans.append((start, start + length))
    return spans
