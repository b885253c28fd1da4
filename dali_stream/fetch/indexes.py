"""The MP4 indexes a loader keeps: each video file indexed once (`mp4index.read_index`), checked against FFmpeg's
reading of it where PyAV is installed, and the least recently used dropped beyond the loader's `index_bytes`."""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from ..config import DEFAULT_INDEX_BYTES
from ..errors import DamagedFileError, DatasetError, VideoFileError
from .mp4index import IndexUnsupported, Mp4Index, read_index
from .segments import entry_size


@dataclass
class IndexedFile:
    """A video file (remote or local) ready for cutting: its index, checked against FFmpeg's reading of the file
    when it was made (segments are written from the index's `stsd`, `mp4write`: no demuxer is kept open, so what
    a file costs is what `_index_bytes` weighs, not that plus FFmpeg's own index of it)."""

    index: Mp4Index


def _index_bytes(value: Any) -> int:
    if value is None:
        return 0
    index = value.index
    return index.nbytes + sum(len(b) for _, b in index.pieces) + len(index.stsd)


class IndexCache:
    """Video files of a RemoteFS, each indexed and opened once even when threads race; the least recently used
    are dropped beyond `capacity_bytes` of index arrays (the loader's `index_bytes`).

    A file whose layout `read_index` does not handle maps to None (why: `unsupported`): its episodes are
    cut through the demuxer and plain range requests. A damaged file raises `DamagedVideoError` (each `get`)."""

    def __init__(self, rfs, capacity_bytes: int = DEFAULT_INDEX_BYTES, *, shared: "IndexCache | None" = None,
                 fps: float | None = None, meta: Any = None) -> None:
        """`shared`: another file system's cache whose bound this one shares (a mixture's members: one
        `capacity_bytes` for all of them, each file kept under its own file system's name). `fps`: the dataset's
        (info.json), which each file's own frame rate is checked against as it is indexed (`check_rate`). `meta`
        (`meta.dataset.DatasetMeta`): the dataset whose cameras' sizes a file asked for with its camera
        (`get(path, camera)`) is checked against as it is indexed (`check_size`)."""
        from .once import OncePerKey

        self.rfs, self.fps, self.meta = rfs, fps, meta
        self.files: Any = shared.files if shared is not None else \
            OncePerKey(capacity_bytes=capacity_bytes, weigh=_index_bytes)
        # path -> why it is read without an index (of every file system sharing the bound)
        self.unsupported: dict[str, str] = shared.unsupported if shared is not None else {}
        # path -> the DatasetError its rate or size check raised: raised again at once, never indexed again (a
        # refused file is asked for by every episode of it, and its message names them all)
        self.refused: dict[str, Exception] = shared.refused if shared is not None else {}

    def get(self, path: str, camera: str | None = None) -> IndexedFile | None:
        """`path`'s index (None: a layout it does not handle); `camera`: the camera the file is of, whose size in
        `meta` the file's is checked against when it is first indexed."""
        refused = self.refused.get(path)
        if refused is not None:
            raise refused
        return self.files.get((id(self.rfs), path), lambda: self._open(path, camera))

    def close(self) -> None:
        """Forget every indexed file (of every cache sharing the bound)."""
        self.files.clear()

    def _open(self, path: str, camera: str | None) -> IndexedFile | None:
        try:
            index = read_index(self.rfs, path)
        except DamagedFileError:
            raise  # the file contradicts itself: named as such, not read again through the demuxer
        except (IndexUnsupported, VideoFileError, struct.error, IndexError, ValueError) as exc:
            self.unsupported[path] = f"{type(exc).__name__}: {exc}"
            return None
        try:
            if self.fps is not None:
                check_rate(index, self.fps, path)
            if self.meta is not None and camera is not None:
                check_size(entry_size(index.stsd), camera_size(self.meta, camera), camera, path,
                           lambda: episodes_in(self.meta, path, camera))
        except DatasetError as exc:
            self.refused[path] = exc
            raise
        try:
            import av
        except ImportError:  # a node without PyAV (NVDEC's open engine needs no FFmpeg): our index alone
            return IndexedFile(dataclasses.replace(index, pieces=()))
        try:
            # short reads: FFmpeg reads the pieces indexing fetched and skips the mdat between them
            container = av.open(self.rfs.open(path, "rb", pieces=index.pieces, short_reads=True), "r")
        except av.error.FFmpegError as exc:  # the demuxing cut reports what is wrong with the file
            self.unsupported[path] = f"{type(exc).__name__}: {exc}"
            return None
        if not container.streams.video:  # a damaged moov: the demuxing cut names the file and the fix
            container.close()
            self.unsupported[path] = "the demuxer finds no video track"
            return None
        time_base = container.streams.video[0].time_base
        container.close()  # FFmpeg's own index of the file (tens of bytes a sample) is not kept beside ours
        if time_base != Fraction(1, index.timescale):
            self.unsupported[path] = f"stream time base {time_base} is not 1/{index.timescale}"
            return None
        # the bytes read while indexing served FFmpeg's check; the index no longer needs them
        return IndexedFile(dataclasses.replace(index, pieces=()))


RATE_TOLERANCE = 0.01  # relative: 29.97 fps video in a 30 fps dataset passes, 25 in 30 does not


def rate_fits(rate: float, fps: float) -> bool:
    """Whether a video running at `rate` frames a second serves a dataset of `fps`: the same rate or a whole multiple
    of it, within `RATE_TOLERANCE` (`check_rate`; diagnose asks the same)."""
    times = max(1, round(rate / fps))
    return abs(rate - times * fps) <= RATE_TOLERANCE * times * fps


def check_rate(index: Mp4Index, fps: float, path: str) -> None:
    """A `DatasetError` where the video's own frame rate (`Mp4Index.frame_rate`) is not the dataset's `fps`, nor a
    whole multiple of it (a 30 fps video of a 10 fps dataset holds every frame asked for: frames are found by
    time), within `RATE_TOLERANCE`: every window (`delta_timestamps` in seconds, turned into frames at `fps`) and
    frame time would come out wrong without another error."""
    rate = index.frame_rate
    if rate is None or rate_fits(rate, fps):
        return
    raise DatasetError(
        f"meta/info.json says fps {fps:g}, but video file {path} shows {rate:.4g} frames a second (its frames are "
        f"{1 / rate:.6f} s apart, not {1 / fps:.6f}): windows (delta_timestamps) and frame times would come out "
        f"wrong. Correct `fps` in meta/info.json (and the cameras' `video.fps`) to {rate:.4g}, or re-encode the "
        f"videos at {fps:g} fps")


def check_size(got: tuple[int, int] | None, want: tuple[int, int] | None, camera: str, path: str,
               episodes: Callable[[], list[int]]) -> None:
    """A `DatasetError` where a video's pictures (`got`, (height, width) from its MP4 sample entry) are not the size
    meta/info.json gives its camera (`want`; None either: not known, not checked): every route checks by this rule,
    the loader as each file is first indexed, the open-decoder engines each segment (NVDEC would rescale to its first
    size, the others hand batches of another shape). `episodes`: those of the file, asked only for the message."""
    if got is None or want is None or tuple(got) == tuple(want):
        return
    raise DatasetError(
        f"camera {camera!r}: video file {path} (episodes {episodes()}) is {got[1]}x{got[0]} (width x height) but "
        f"meta/info.json gives the camera {want[1]}x{want[0]}; every file of a camera must have the camera's size: "
        f"re-encode the file at {want[1]}x{want[0]}, or fix the camera's shape (and video.height, video.width) in "
        "meta/info.json's features")


def camera_size(meta: Any, camera: str) -> tuple[int, int] | None:
    """(height, width) meta/info.json gives video camera `camera` of `meta` (None: not a video camera, or not given)."""
    cam = meta.cameras.get(camera)
    return (cam.height, cam.width) if cam is not None and cam.height and cam.width else None


def episodes_in(meta: Any, path: str, camera: str) -> list[int]:
    """The episodes of `meta` whose `camera` frames are in video file `path`."""
    return [meta.episode_index(pos) for pos in range(meta.num_episodes) if meta.video_file(pos, camera) == path]
