"""Decoders that stay open and are fed packets (`decode.feed`): NVDEC through PyNvVideoCodec, and FFmpeg's CPU
decoders through PyAV as the reference the same engine runs on any node (`decode.engine`).

Each decoder serves one (decode thread, camera, codec) for the loader's life: `decode(feed)` sends each clip's
packets with their feed times, then ends the stream so the clip's last pictures come out, and resets for the next
clip without being recreated (`decode.feed`: why every clip ends as a stream). It returns the asked pictures by the time the decoder handed back with each, (H, W, 3)
uint8: numpy arrays on the CPU, torch tensors on the GPU.

Why PyNvVideoCodec (docs/architecture.md, "Our code or a library's"): NVIDIA's own Python binding of the Video Codec SDK's
decoder, a 27 MB wheel with no dependencies, that takes a packet from a Python buffer (`PacketData`), keeps its
NVDEC decoder across streams (each clip's sequence header is parsed anew; a stream within the decoder's maximum,
set here from the camera's size, reconfigures the decoder, `cuvidReconfigureDecoder`, instead of creating one) and
hands frames over by DLPack. Writing our own binding of `nvcuvid` would repeat all of that. Its RGB conversion is
not used: it takes BT.709 for untagged video where FFmpeg takes BT.601, so frames come out as NV12 and are
converted by `decode.nv12` with the matrix and range `decode.colour` reads, as FFmpeg would convert the same stream.

CUDA context and streams (NVDEC): the decoder runs in the device's primary context, the one torch and DALI use
(retained through the driver API, never created), so no context is pushed or switched between libraries. Each
decoder gets a CUDA stream of its own, made by torch; the decoder's copies out of its surfaces, our colour
conversion of each asked picture and the stacking run on that stream, in order, so a surface is read before the
decoder's next picture may overwrite it. Before the frames leave the decode thread that stream is synchronised
(`finish`). The engine then joins the threads' frames on its hand-off stream (`engine.OpenDecoders.hand_over`),
and DALI's external source copies them on that same stream without blocking (`graph.pipeline`); neither the
join nor the copy touches the legacy default stream, where the training step's kernels run, and the batch is
made on the loader's own stream and handed to the caller's by a wait on the GPU (`loader.deliver.HandOff`), so a
batch never waits behind them. No lock is held while a stream synchronises.

What PyNvVideoCodec does on a failed CUDA driver call (2.2): it logs FATAL and ends the process with exit(1) (in
its constructor, in a frame's DLPack set-up and in `__dlpack__`'s stream wait): no exception reaches Python, so
no `DecodeError` can name the episode. The GPU tests run the engine in child processes, so such an end is a
named failure with its output; `dali-stream diagnose` says whether PyNvVideoCodec imports here, and why not.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ..errors import DecodeError
from .colour import Colour, rgb24
from .feed import Feed
from .nv12 import fused_runs, nv12_to_rgb

AV_DECODERS = {"h264": ("h264",), "hevc": ("hevc",), "av1": ("libdav1d", "libaom-av1", "av1"), "vp9": ("vp9",),
               "vp8": ("vp8",)}
NVDEC_CODECS = {"h264": "H264", "hevc": "HEVC", "av1": "AV1", "vp9": "VP9", "vp8": "VP8"}


class AvPacketDecoder:
    """FFmpeg's decoder for `codec`, fed packet by packet through PyAV's `CodecContext` (CPU)."""

    device = "cpu"

    def __init__(self, codec: str) -> None:
        import av

        self.codec = codec
        names = AV_DECODERS.get(codec, (codec,))
        for name in names:
            try:
                self.ctx = av.CodecContext.create(name, "r")
                break
            except Exception:  # noqa: BLE001 - this FFmpeg build lacks the decoder: try the next one
                continue
        else:
            raise DecodeError(f"FFmpeg (PyAV {av.__version__}) has no decoder for {codec} (tried {list(names)}); "
                              "decode the camera with torchcodec: decode='cpu'")

    def decode(self, feed: Feed) -> tuple[dict[int, Any], float]:
        """The asked pictures of `feed` by feed time, and the seconds spent converting them to RGB."""
        wanted = set(feed.wanted.tolist())
        out: dict[int, Any] = {}
        pts_all = feed.pts.tolist()
        convert_s = 0.0
        for first, end in feed.clip_ranges():
            convert_s += self._keep(self.frames(feed.units[first:end], pts_all[first:end]), wanted, out)
        return out, convert_s

    def frames(self, units: list[bytes], pts: list[int]):
        """The pictures of one clip's packets, as PyAV frames: the packets fed with their times, then an end of
        stream (the pictures still held come out); the decoder is then ready for the next clip."""
        import av

        for unit, t in zip(units, pts):
            packet = av.Packet(unit)
            packet.pts = t
            yield from self.ctx.decode(packet)
        yield from self.ctx.decode(None)
        self.ctx.flush_buffers()

    @staticmethod
    def _keep(frames, wanted: set, out: dict) -> float:
        convert_s = 0.0
        for frame in frames:
            if frame.pts in wanted:
                t0 = time.perf_counter()
                out[frame.pts] = rgb24(frame)
                convert_s += time.perf_counter() - t0
        return convert_s

    def stack(self, frames: list) -> np.ndarray:
        return np.stack(frames)

    def finish(self) -> None:
        """Nothing is asynchronous on the CPU."""

    def close(self) -> None:
        """Drop the decoder, drained first: FFmpeg frees a context by flushing it, and dav1d's flush with
        pictures still in its frame threads (a clip abandoned after its first picture, `probe_colour`, or a decode
        that raised) waited forever on a 2-core machine under load."""
        ctx, self.ctx = self.ctx, None
        if ctx is None:
            return
        try:
            for _ in ctx.decode(None):  # end of stream: the pictures in flight come out
                pass
        except Exception:  # noqa: BLE001 - a decoder in error has nothing in flight to drain
            pass


def primary_context(device_index: int) -> int:
    """The device's primary CUDA context (the one torch and DALI run in), retained through the driver API."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    device, ctx = ctypes.c_int(), ctypes.c_void_p()
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(device), device_index)),
                       ("cuDevicePrimaryCtxRetain", (ctypes.byref(ctx), device))):
        status = getattr(cuda, call)(*args)
        if status != 0:
            raise DecodeError(f"{call} failed with CUDA driver error {status} for device {device_index}; "
                              "`dali-stream diagnose` checks the driver")
    return int(ctx.value or 0)


# held while a file's colour is probed: once a file, so a short wait once a file at most
_PROBING = threading.Lock()


def probe_colour(codec: str, units: list[bytes], pts: list[int]) -> Colour:
    """How FFmpeg converts the stream a clip's packets belong to (`decode.colour`): its first picture decoded by
    FFmpeg's own decoder on the CPU, its matrix and range read (once per file: a keyframe's worth)."""
    dec = AvPacketDecoder(codec)
    try:
        for frame in dec.frames(units, pts):
            return Colour.of_frame(frame)
    finally:
        dec.close()
    raise DecodeError(f"FFmpeg's {codec} decoder gave no picture for a clip's packets, so its colours cannot be "
                      "read; decode the camera with torchcodec: decode='cpu'")


class NvdecPacketDecoder:
    """An NVDEC decoder through PyNvVideoCodec, fed packets, frames out as RGB (H, W, 3) uint8 CUDA tensors.

    NVDEC hands out NV12 (`OutputColorType.NATIVE`), converted here (`decode.nv12`) with the matrix and range FFmpeg uses for
    the same stream (`decode.colour`; PyNvVideoCodec's own RGB takes BT.709 for untagged video, FFmpeg BT.601), so
    this route's colours are every other route's. A picture of another size than `max_size` (the camera's, from
    meta/info.json) never reaches it: the engine refuses the segment first (`engine_parts.check_sizes`, a `DatasetError`)."""

    device = "gpu"

    def __init__(self, codec: str, device_index: int, max_size: tuple[int, int] | None = None,
                 colours: dict[str, Colour] | None = None) -> None:
        import torch

        try:
            import PyNvVideoCodec as nvc  # type: ignore[import-not-found]
        except Exception as exc:  # noqa: BLE001 - not installed, or no NVENC/NVDEC driver library
            raise DecodeError(
                f"the open-decoder NVDEC engine needs PyNvVideoCodec, which does not import here "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); `dali-stream diagnose` "
                "says why; install it with `pip install '.[nvdec]'` in the dali_stream checkout, or use DALI's NVDEC engine: "
                "nvdec_engine='dali'") from None
        if codec not in NVDEC_CODECS:
            raise DecodeError(f"NVDEC has no {codec} decoder; decode the camera with torchcodec: decode='cpu'")
        self.nvc, self.torch, self.codec = nvc, torch, codec
        self.device_index = device_index
        self.stream = torch.cuda.Stream(device=device_index)
        # the surfaces' largest size: the camera's, rounded up to whole 128-pixel blocks (the coded size of a
        # 1080-row H.264 stream is 1088; an HEVC or AV1 one rounds to its coding blocks), 0: the stream's own
        height, width = (-(-n // 128) * 128 for n in max_size) if max_size else (0, 0)
        self.size = max_size
        # file -> its colour as FFmpeg reads it; shared by the engine's decoders, so each file is probed once
        self.colours = {} if colours is None else colours
        self.dec = nvc.CreateDecoder(gpuid=device_index, codec=getattr(nvc.cudaVideoCodec, NVDEC_CODECS[codec]),
                                     cudacontext=primary_context(device_index), cudastream=self.stream.cuda_stream,
                                     usedevicememory=True, maxwidth=width, maxheight=height,
                                     outputColorType=nvc.OutputColorType.NATIVE)

    def colour(self, feed: Feed, clip: int, first: int, end: int) -> Colour:
        """The colour of clip `clip` (units `first` to `end`) of `feed`: its file's, read once (`probe_colour`)."""
        source = feed.sources[clip]
        found = self.colours.get(source)
        if found is None:
            with _PROBING:  # decode threads meeting a new file at once: one probes, the others wait for its answer
                found = self.colours.get(source)
                if found is None:
                    found = self.colours[source] = probe_colour(self.codec, feed.units[first:end],
                                                                feed.pts[first:end].tolist())
        return found

    def decode(self, feed: Feed) -> tuple[dict[int, Any], float]:
        """The asked pictures of `feed` by feed time, and the seconds spent converting them to RGB (the kernels'
        launch: they run on this decoder's stream).

        Where the fused conversion runs (`decode.nv12`: one kernel, CUDA), each asked picture is converted straight
        out of its surface as it comes, one launch, before the decoder's next call may overwrite the surface
        (`each`): the camera's size known and even. Elsewhere each is copied out (one launch) and the copies of one
        stream are converted together once the feed is decoded, by the fused kernel where the coded size is even and
        it runs, else by the portable form: the portable conversion is a few dozen small kernels, which launched per picture took
        half a decode thread's time and, from several decode threads at once, queued on the GIL (thread-ms of the
        conversion 1.3 a sample at one thread, 15 at seven, on an H100); launched per stack they cost the same for
        one picture or sixteen."""
        nvc = self.nvc
        wanted = set(feed.wanted.tolist())
        kept: dict[tuple, list[tuple[int, Any]]] = {}  # (colour, NV12 shape) -> [(feed time, NV12 copy, or RGB: each)]
        pts_all = feed.pts.tolist()
        convert_s = 0.0
        # each picture converted as it leaves its surface where the one-launch conversion runs (the camera's size
        # known and even, the kernel not set aside), else copied and converted as a stack
        each = self.size is not None and fused_runs(self.torch.device("cuda", self.device_index), *self.size)
        with self.torch.cuda.stream(self.stream):
            for clip, (first, end) in enumerate(feed.clip_ranges()):
                colour = self.colour(feed, clip, first, end)
                for unit, pts in zip(feed.units[first:end], pts_all[first:end]):
                    buf = np.frombuffer(unit, np.uint8)  # alive until Decode returns: the parser copies it
                    packet = nvc.PacketData()
                    packet.bsl_data, packet.bsl, packet.pts = int(buf.ctypes.data), int(buf.size), int(pts)
                    convert_s += self._keep(self.dec.Decode(packet), wanted, kept, colour, each)
                eos = nvc.PacketData()
                eos.bsl_data, eos.bsl = 0, 0  # end of stream: the clip's pictures still held come out
                convert_s += self._keep(self.dec.Decode(eos), wanted, kept, colour, each)
            t0 = time.perf_counter()
            out: dict[int, Any] = {}
            for (colour, shape), pictures in kept.items():
                if each:
                    out.update(pictures)
                    continue
                height, width = self._size(shape)
                rgb = nv12_to_rgb(self.torch.stack([nv12 for _, nv12 in pictures]), height, width, colour)
                out.update((pts, rgb[i]) for i, (pts, _) in enumerate(pictures))
            convert_s += time.perf_counter() - t0
        return out, convert_s

    def _keep(self, frames, wanted: set, kept: dict, colour: Colour, each: bool) -> float:
        """Copy the asked ones of `frames` into `kept`; the seconds it took."""
        convert_s = 0.0
        for frame in frames:
            pts = int(frame.getPTS())
            if pts not in wanted:
                continue
            t0 = time.perf_counter()
            nv12 = self.torch.from_dlpack(frame)
            if nv12.ndim == 3 and nv12.shape[-1] == 1:
                nv12 = nv12[..., 0]
            if nv12.ndim != 2 or nv12.dtype != self.torch.uint8 or nv12.shape[0] % 3:
                raise DecodeError(f"PyNvVideoCodec handed a native frame of shape {tuple(nv12.shape)} and dtype "
                                  f"{nv12.dtype}, not 8-bit NV12 (H * 3 / 2, W): a stream of more than 8 bits, or not "
                                  "the PyNvVideoCodec the engine was written for (2.2); use nvdec_engine='dali'")
            # converted or copied on this decoder's stream, before the decoder's next call may overwrite the surface
            kept.setdefault((colour, tuple(nv12.shape)), []).append(
                (pts, nv12_to_rgb(nv12, *self._size(nv12.shape), colour) if each else nv12.clone()))
            convert_s += time.perf_counter() - t0
        return convert_s

    def _size(self, shape: tuple) -> tuple[int, int]:
        """(height, width) of the pictures of NV12 `shape`: the camera's, else the surface's."""
        return self.size if self.size else (shape[0] * 2 // 3, shape[1])

    def stack(self, frames: list):
        with self.torch.cuda.stream(self.stream):
            return self.torch.stack(frames)

    def finish(self) -> None:
        """Wait for this decoder's stream: its frames are complete when they leave the decode thread."""
        self.stream.synchronize()

    def close(self) -> None:
        self.dec = None
