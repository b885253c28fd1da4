"""The decode routes, each named once here with what it is: where it decodes, which decoder, what it imports.

A camera's route is a name from `ROUTES` (what `loader.routes` reports); code asks a route's properties
(`route(name).in_dali`, `.on_gpu`, `.engine`, ...) instead of testing names against sets of its own. Which route a
camera takes on a node is `decode.routes`' business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

# The open engine's NVDEC decode threads by default: one per NVDEC engine, at most this many. Past it the threads
# contend for the host, not for NVDEC: on an H200 (7 engines, benchmarks/results/NVIDIA-H200/2026-11-29/,
# gpu-first) 4 threads gave the best or within 0.95 of the best samples/s in all six cases (640x480 H.264 and
# HEVC, 256x256 H.264, one frame and 8-step windows), 7 threads 0.78-0.88 of it (one run each); the H100's run of
# an earlier engine (2026-11-26) put 4 threads at 0.70-1.0 of its best, 7 at 0.50-0.77.
OPEN_NVDEC_THREADS = 4


@dataclass(frozen=True)
class Route:
    """`name`: as `loader.routes` reports it; `device`: where pictures are decoded; `decoder`: DALI's
    fn.decoders.video inside the graph ("dali"), torchcodec on the workers' threads ("torchcodec"), the
    open-decoder engine's decoders kept open and fed packets (`decode.engine`, "engine"), a depth camera's codes
    through PyAV on the workers' threads (`decode.depth`, "pyav"), or a camera stored as images in the frame tables,
    decoded from the rows' bytes on the workers (`decode.images`, "images"); `needs`: the module it
    imports to decode; `choice`: the `decode=` setting that gives a camera this route where its stream allows
    (`nvdec-open` with nvdec_engine='open'); `codecs`: the codecs it decodes where its decoder limits them (None:
    every codec its device takes: the capability table decides NVDEC's, `decode.gpus`)."""

    name: str
    device: Literal["gpu", "cpu"]
    decoder: Literal["dali", "torchcodec", "engine", "pyav", "images"]
    needs: str
    choice: str
    about: str
    codecs: frozenset[str] | None = None

    def takes(self, codec: str) -> bool:
        """Whether its decoder decodes `codec` at all (NVDEC's per-GPU limits: `decode.routes.Node`)."""
        return self.codecs is None or codec in self.codecs

    def threads(self, nvdec_engines: int, num_workers: int) -> int:
        """Decode threads an open-decoder engine on this route runs: on the GPU one per NVDEC engine (one decoder
        instance cannot use more than one engine), at most `OPEN_NVDEC_THREADS` (past it the host binds); on the
        CPU one per worker; at least 1."""
        return max(1, min(nvdec_engines, OPEN_NVDEC_THREADS) if self.on_gpu else num_workers)

    def processes(self, nvdec_engines: int, rank_cores: int) -> int:
        """Decode processes an open-decoder engine on this route runs by default (`decode.process_engine`; 0: its
        threads in the loader's process): on the GPU one per NVDEC engine, at most the rank's cores less one for the
        loop, where that makes two or more (an H200's NVDEC, 640x480: processes of one thread gave 1,130 / 1,975 /
        3,114 samples/s at 2 / 4 / 7 where 4 threads in one process gave 1,006 and more threads less; one process
        556); on the CPU 0: FFmpeg's decoders release the interpreter's lock, and processes are not yet measured
        faster there."""
        if not self.on_gpu:
            return 0
        n = min(nvdec_engines, rank_cores - 1)
        return n if n >= 2 else 0

    @property
    def dali_gpu(self) -> bool:
        """DALI's decoder on NVDEC, inside the graph: a thread per NVDEC engine, one sample's clip per decode."""
        return self.on_gpu and self.in_dali

    @property
    def on_gpu(self) -> bool:
        """Decodes on NVDEC."""
        return self.device == "gpu"

    @property
    def in_dali(self) -> bool:
        """DALI's decoder, inside the graph: it needs a stream for every sample, and its clips can be joined
        (`graph.joined`)."""
        return self.decoder == "dali"

    @property
    def engine(self) -> bool:
        """The open-decoder engine decodes it; its frames enter the graph through a source of their own."""
        return self.decoder == "engine"

    @property
    def torchcodec(self) -> bool:
        """torchcodec on the workers' threads: the route host frames serve (with DALI's CPU decoder where it runs on
        the workers, `Resolved.dali_on_workers`)."""
        return self.decoder == "torchcodec"

    @property
    def depth(self) -> bool:
        """A depth camera's 12-bit codes, decoded on the workers and laid out there as depth (`graph.depth_frames`),
        whatever else the batch does: the DALI graph and its image ops take RGB pictures only."""
        return self.decoder == "pyav"

    @property
    def from_segments_on_workers(self) -> bool:
        """Its decoder runs on the workers' threads over an episode's segment (torchcodec; a depth camera's PyAV),
        so a pool's open episode can be decoded whole there once (`decode.episode_frames`); DALI's CPU decoder does
        too where it runs on the workers (`Resolved.dali_on_workers`)."""
        return self.decoder in ("torchcodec", "pyav")

    @property
    def in_tables(self) -> bool:
        """A camera stored as images (PNG, JPEG) in the frame tables: no video, no segment; its rows' bytes are
        decoded and laid out by the workers (`graph.table_images`), whatever else the batch does."""
        return self.decoder == "images"

    @property
    def cached(self) -> bool:
        """The decoded-frame cache (`decode.frames`) keeps its pictures: they come to the workers as host arrays
        (torchcodec, the open engine's FFmpeg decoders, DALI's CPU decoder, which then runs on the workers instead
        of the graph: `graph.dali_frames`; images stored in the tables: a 256x256 PNG costs ~1.3 ms to decode on one
        core; a depth camera's 12-bit codes, (H, W) uint16). NVDEC's pictures are CUDA memory."""
        return self.device == "cpu"

    @property
    def rgb(self) -> bool:
        """Its pictures are RGB: `resize`, `crop` and a channels-first layout apply (a depth camera's codes keep
        their recorded size, one channel)."""
        return not self.depth


NVDEC = Route("nvdec", "gpu", "dali", "nvidia.dali", "gpu",
              "DALI's fn.decoders.video(device='mixed') on NVDEC, inside the DALI graph")
NVDEC_OPEN = Route("nvdec-open", "gpu", "engine", "PyNvVideoCodec", "gpu",
                   "NVDEC through PyNvVideoCodec's decoders kept open and fed packets")
DALI_CPU = Route("dali-cpu", "cpu", "dali", "nvidia.dali", "dali-cpu",
                 "DALI's fn.decoders.video(device='cpu'), inside the DALI graph (VP8/VP9/MJPEG only)",
                 frozenset({"vp8", "vp9", "mjpeg"}))
TORCHCODEC = Route("torchcodec", "cpu", "torchcodec", "torchcodec", "cpu",
                   "torchcodec on the workers' threads")
CPU_OPEN = Route("cpu-open", "cpu", "engine", "av", "cpu-open",
                 "FFmpeg's decoders through PyAV, kept open and fed packets (the open engine on the CPU)")
DEPTH = Route("depth", "cpu", "pyav", "av", "auto",
              "a depth camera's 12-bit codes through PyAV on the workers' threads, laid out as depth there")
TABLE_IMAGES = Route("table-images", "cpu", "images", "av", "auto",
                     "a camera stored as images in the frame tables: each row's image decoded on the workers")
ROUTES: dict[str, Route] = {r.name: r for r in (NVDEC, NVDEC_OPEN, DALI_CPU, TORCHCODEC, CPU_OPEN, DEPTH, TABLE_IMAGES)}


def route(name: str) -> Route:
    """The route named `name` (a value of `loader.routes`)."""
    try:
        return ROUTES[name]
    except KeyError:
        raise ValueError(f"no decode route {name!r}; routes: {sorted(ROUTES)}") from None


def keys_where(routes: dict[str, str], prop: str) -> list[str]:
    """The camera keys of `routes` (key -> route name) whose route has property `prop` (e.g. "in_dali")."""
    return [k for k, name in routes.items() if getattr(route(name), prop)]


def any_where(names: Iterable[str], prop: str) -> bool:
    """Whether any of the route `names` has property `prop`."""
    return any(getattr(route(n), prop) for n in names)
