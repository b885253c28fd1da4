"""The decode routes: one object per route, registered once here, that says what it is (where it decodes, which
decoder, what it imports), makes its engine where it has one, and picks its camera's frame source.

A camera's route is a `Route` from the moment the `decode=` setting is read (`decode.routes`, the settings' edge)
to the batch: code passes the object and asks its properties (`.in_dali`, `.on_gpu`, `.engine`, ...), never a name
again. `loader.routes` reports the names. Adding a route is a subclass where its decoder differs (its frame source:
`frame_source`, made by the graph's `SourceKit`; its engine: `EngineRoute.packet_decoder`; in an importable module)
and one `register` call;
which route a camera takes on a node is `decode.routes`' business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

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
        """A depth camera's 12-bit codes, decoded on the workers and laid out there as depth (`graph.depth_source`),
        whatever else the batch does: the DALI graph and its image ops take RGB pictures only."""
        return self.decoder == "pyav"

    @property
    def from_segments_on_workers(self) -> bool:
        """Its decoder runs on the workers' threads over an episode's segment (torchcodec; a depth camera's PyAV),
        so a pool's open episode can be decoded whole there once (`decode.open_episodes`); DALI's CPU decoder does
        too where it runs on the workers (`Resolved.dali_on_workers`)."""
        return self.decoder in ("torchcodec", "pyav")

    @property
    def in_tables(self) -> bool:
        """A camera stored as images (PNG, JPEG) in the frame tables: no video, no segment; its rows' bytes are
        decoded and laid out by the workers (`graph.table_images`), whatever else the batch does."""
        return self.decoder == "images"

    @property
    def cached(self) -> bool:
        """The decoded-frame cache (`decode.frame_cache`) keeps its pictures: they come to the workers as host arrays
        (torchcodec, the open engine's FFmpeg decoders, DALI's CPU decoder, which then runs on the workers instead
        of the graph: `graph.dali_on_workers`; images stored in the tables: a 256x256 PNG costs ~1.3 ms to decode on one
        core; a depth camera's 12-bit codes, (H, W) uint16). NVDEC's pictures are CUDA memory."""
        return self.device == "cpu"

    @property
    def rgb(self) -> bool:
        """Its pictures are RGB: `resize`, `crop` and a channels-first layout apply (a depth camera's codes keep
        their recorded size, one channel)."""
        return not self.depth

    def frame_source(self, key: str, kit: Any) -> Any:
        """Camera `key`'s frame source (`graph.sources`), made by `kit` (`graph.source_kit.SourceKit`, which holds
        what sources share): decoded on the workers, laid out into the batch there (host frames) or fed to the
        graph as pixels."""
        return kit.host(key, self) if kit.on_host(key) else kit.pixels(key, self)

    def __str__(self) -> str:
        return self.name

    # a route is known by its name (unique in `ROUTES`): it equals its name, as `loader.routes` reports it
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Route):
            return self.name == other.name
        return isinstance(other, str) and self.name == other

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True, eq=False)
class DaliRoute(Route):
    """DALI's decoder: in the graph, a stream per sample or per group of joined clips; where its CPU decoder runs on
    the workers instead (`Resolved.dali_on_workers`), as pixels or host frames like torchcodec's."""

    def frame_source(self, key: str, kit: Any) -> Any:
        if kit.on_host(key) or kit.dali_on_workers(key):
            return super().frame_source(key, kit)
        return kit.dali_clips(key, self)


@dataclass(frozen=True, eq=False)
class EngineRoute(Route):
    """An open-decoder engine's route (`decode.engine`): its decoders stay open, fed packets; its pictures enter the
    graph through the route's own external source. A subclass says which packet decoder it opens."""

    def frame_source(self, key: str, kit: Any) -> Any:
        return kit.engine(key, self)

    def packet_decoder(self, codec: str, camera: str, device_index: int | None,
                       sizes: Mapping[str, tuple[int, int] | None], colours: dict) -> Any:
        """A new decoder of `codec` for `camera` (`decode.packet_decoders`), in the process that decodes."""
        raise NotImplementedError

    def hand_off_stream(self, device_index: int | None) -> Any:
        """The CUDA stream the engine's frames are handed over on (`engine_parts.hand_over`); None on the CPU."""
        return None

    def make_engine(self, threads: int, device_index: int | None, sizes: dict[str, tuple[int, int] | None],
                    colours: dict | None = None, processes: int = 0) -> Any:
        """The engine, in the form its counts say: `processes` > 0: that many decode processes of one thread each
        (`decode.process_engine`), else `threads` decode threads in this process (`decode.engine`). The loader passes
        the counts by keyword, as the Engines part of `loader.resolve_threads` gives them (`engine_form`): a new
        form's count is a keyword here and a field of that part naming it. `sizes`: camera -> (height, width) from
        meta/info.json (None: the stream's own); `colours`: file -> `decode.colour.Colour` known beforehand (else
        each file's is read by FFmpeg on first use: a node without PyAV must give them)."""
        from .engine import OpenDecoders
        from .process_engine import ProcessEngine

        stream = self.hand_off_stream(device_index)
        colours = {} if colours is None else colours  # each file's colour, read once for every decoder
        if processes:
            return ProcessEngine(self, processes, device_index, sizes, colours, stream)
        return OpenDecoders(lambda codec, camera: self.packet_decoder(codec, camera, device_index, sizes, colours),
                            threads, self, sizes, stream)


@dataclass(frozen=True, eq=False)
class NvdecOpenRoute(EngineRoute):
    """NVDEC through PyNvVideoCodec, on CUDA device `device_index`."""

    def packet_decoder(self, codec: str, camera: str, device_index: int | None,
                       sizes: Mapping[str, tuple[int, int] | None], colours: dict) -> Any:
        from .packet_decoders import NvdecPacketDecoder

        assert device_index is not None  # `hand_off_stream` refused the route without a CUDA device
        return NvdecPacketDecoder(codec, device_index, sizes.get(camera), colours)

    def hand_off_stream(self, device_index: int | None) -> Any:
        if device_index is None:
            from ..errors import DecodeError

            raise DecodeError(f"the {self.name} route needs a CUDA device; decode='cpu' decodes on the CPU")
        import torch

        return torch.cuda.Stream(device=device_index)  # a stream of its own, never the legacy default one


@dataclass(frozen=True, eq=False)
class CpuOpenRoute(EngineRoute):
    """FFmpeg's decoders through PyAV: the open engine on any node."""

    def packet_decoder(self, codec: str, camera: str, device_index: int | None,
                       sizes: Mapping[str, tuple[int, int] | None], colours: dict) -> Any:
        from .packet_decoders import AvPacketDecoder

        return AvPacketDecoder(codec)


@dataclass(frozen=True, eq=False)
class DepthRoute(Route):
    def frame_source(self, key: str, kit: Any) -> Any:
        return kit.depth(key, self)


@dataclass(frozen=True, eq=False)
class TableImagesRoute(Route):
    def frame_source(self, key: str, kit: Any) -> Any:
        return kit.tables(key, self)


ROUTES: dict[str, Route] = {}  # name -> route, in the order registered


def register(route: Route) -> Route:
    """Add `route` to `ROUTES` (a second route of one name, or an engine route that is not an `EngineRoute`, is a
    mistake, said at import). An engine route's class must be importable by its module's name: decode processes
    (`decode.process_engine`) are spawned without the caller's script and unpickle the route there."""
    if route.name in ROUTES:
        raise ValueError(f"decode route {route.name!r} is registered twice")
    if route.engine != isinstance(route, EngineRoute):
        raise ValueError(f"decode route {route.name!r}: decoder={route.decoder!r} with class {type(route).__name__}; "
                         "an open-decoder engine's route is an EngineRoute with decoder='engine', no other is")
    ROUTES[route.name] = route
    return route


NVDEC = register(DaliRoute("nvdec", "gpu", "dali", "nvidia.dali", "gpu",
                           "DALI's fn.decoders.video(device='mixed') on NVDEC, inside the DALI graph"))
NVDEC_OPEN = register(NvdecOpenRoute("nvdec-open", "gpu", "engine", "PyNvVideoCodec", "gpu",
                                     "NVDEC through PyNvVideoCodec's decoders kept open and fed packets"))
DALI_CPU = register(DaliRoute("dali-cpu", "cpu", "dali", "nvidia.dali", "dali-cpu",
                              "DALI's fn.decoders.video(device='cpu'), inside the DALI graph (VP8/VP9/MJPEG only)",
                              frozenset({"vp8", "vp9", "mjpeg"})))
TORCHCODEC = register(Route("torchcodec", "cpu", "torchcodec", "torchcodec", "cpu",
                            "torchcodec on the workers' threads"))
CPU_OPEN = register(CpuOpenRoute("cpu-open", "cpu", "engine", "av", "cpu-open",
                                 "FFmpeg's decoders through PyAV, kept open and fed packets (the open engine on the CPU)"))
DEPTH = register(DepthRoute("depth", "cpu", "pyav", "av", "auto",
                            "a depth camera's 12-bit codes through PyAV on the workers' threads, laid out as depth "
                            "there"))
TABLE_IMAGES = register(TableImagesRoute("table-images", "cpu", "images", "av", "auto",
                                         "a camera stored as images in the frame tables: each row's image decoded on "
                                         "the workers"))


def route_named(name: str) -> Route:
    """The route named `name`: for the settings' edge only (a name read from a report or a command line)."""
    try:
        return ROUTES[name]
    except KeyError:
        raise ValueError(f"no decode route {name!r}; routes: {sorted(ROUTES)}") from None


def names(routes: Mapping[str, Route]) -> dict[str, str]:
    """`routes` (key -> route) as the names `loader.routes` reports."""
    return {k: r.name for k, r in routes.items()}


