"""Which decoder handles each camera on this node (the CPU decoder itself is `decode.cpu`).

Routes:
- ``nvdec``: DALI ``fn.decoders.video(device="mixed")`` on the GPU (NVDEC), inside the DALI graph.
- ``dali-cpu``: DALI ``fn.decoders.video(device="cpu")``, inside the DALI graph, ``decode="dali-cpu"``. DALI's CPU
  decoder handles only VP8/VP9/MJPEG (its FFmpeg has no H.264/HEVC/AV1 decoder); `auto` does not take it (slower
  than torchcodec on VP9, and its colours are not FFmpeg's: `_fallback`).
- ``torchcodec``: torchcodec on CPU threads; frames enter the DALI graph through its external source.
- ``nvdec-open``: NVDEC through PyNvVideoCodec's decoders kept open and fed packets (`decode.engine`), chosen for
  NVDEC cameras by ``nvdec_engine`` (`nvdec_engine`); frames enter the graph through an external source on the GPU.
- ``cpu-open``: the same engine on FFmpeg's CPU decoders (PyAV), ``decode="cpu-open"``: the reference the NVDEC
  engine is checked against, on any node.
- ``depth``: a depth camera (lerobot's depth maps: 12-bit codes in a grey video) through PyAV on the workers, for
  every ``decode`` choice but ``"gpu"``, which it refuses (NVDEC decodes no 12-bit grey).
- ``table-images``: a camera stored as images in the frame tables (no video), chosen by `loader.routing`.

``decode`` picks per camera: ``"auto"`` takes NVDEC where this node's NVDEC takes the camera's stream
(codec, size and pixel format against ``gpus``' table) unless a measurement says torchcodec is faster for the
camera's samples (``speed``), else torchcodec; ``"gpu"`` demands NVDEC and fails loudly otherwise; ``"cpu"`` uses
torchcodec for every codec; ``"dali-cpu"`` takes DALI's CPU decoder for the cameras it decodes (VP8/VP9/MJPEG; DALI
installed), torchcodec for the rest.
Each camera gets its `decode.route.Route` (a `RouteChoice`, with its reason): the routes travel as those objects from here on.

What the node can decode (`Node`, its probes and rules) is `decode.node`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from ..config import DECODE_CHOICES
from ..errors import ConfigError, DeviceError
from .node import Node, StreamFormat
from .route import CPU_OPEN, DALI_CPU, DEPTH, NVDEC, NVDEC_OPEN, TORCHCODEC, Route

DALI_CPU_CODECS: frozenset[str] = DALI_CPU.codecs or frozenset()  # what DALI's CPU decoder takes (`Route.codecs`)


# ---- routing ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RouteChoice:
    route: Route
    reason: str  # one line: why this route on this node


def _fallback(fmt: StreamFormat, why_not_nvdec: str) -> RouteChoice:
    """An `auto` camera off NVDEC: torchcodec, FFmpeg's decoders as lerobot decodes with them, for VP8/VP9 too: over
    whole epochs of two VP9 cameras torchcodec ran 1.11x (1.04-1.23x) the samples/s of DALI's CPU decoder
    (`decode='dali-cpu'`) at 96x128 and 1.42x (1.41-1.47x) at 640x480 (2-core VM, `benchmarks/vp9_route.py`), and
    DALI's colours are not FFmpeg's."""
    if DALI_CPU.takes(fmt.codec):
        return RouteChoice(TORCHCODEC, f"{why_not_nvdec}; torchcodec (FFmpeg's {fmt.codec} decoder: lerobot's "
                                         "frames; DALI's CPU decoder, decode='dali-cpu', is slower and its colours "
                                         "differ)")
    return RouteChoice(TORCHCODEC, f"{why_not_nvdec}; torchcodec")


def _dali_cpu(key: str, fmt: StreamFormat, dali: bool) -> RouteChoice:
    """decode='dali-cpu' for camera `key`: DALI's CPU decoder where it takes the stream, torchcodec where it does
    not; DALI not installed is an error (it was asked for)."""
    if not DALI_CPU.takes(fmt.codec):
        return RouteChoice(TORCHCODEC, f"decode='dali-cpu', but DALI's CPU decoder has no {fmt.codec} (only "
                                         f"{', '.join(sorted(DALI_CPU_CODECS))}): torchcodec")
    if not dali:
        raise DeviceError(f"decode='dali-cpu' for camera {key!r} ({fmt.describe()}), but NVIDIA DALI is not installed "
                          "(the CPU install); install the [dali] extra, or use decode='cpu' (torchcodec)")
    return RouteChoice(DALI_CPU, f"decode='dali-cpu': DALI's CPU decoder takes {fmt.codec}")


def formats_of(meta) -> dict[str, StreamFormat]:
    """Each camera's stream format as the dataset's meta/info.json records it."""
    return {k: StreamFormat(c.codec, c.width or None, c.height or None, c.pix_fmt, c.depth is not None)
            for k, c in meta.cameras.items()}


def choose_routes(formats: Mapping[str, StreamFormat], decode: str | Mapping[str, str],
                  node: Node, measured: Callable[[str], tuple[str | None, str]] | None = None,
                  unproven: Callable[[str], str | None] | None = None) -> dict[str, RouteChoice]:
    """Camera key -> route and reason, from each camera's stream format, the user's `decode` and the node.

    `unproven(key)` -> why NVDEC is not proven to give the planned frames for the camera's kind of stream, or
    None (`decode.proven`): an `auto` camera NVDEC could take goes to a CPU route then. `measured(key)` -> (why
    the CPU route is faster for the camera's samples, or None; a note otherwise), from `decode.speed`: an `auto`
    camera NVDEC would take goes to torchcodec where a measurement says so."""
    if isinstance(decode, str):
        choice = {key: decode for key in formats}
    else:
        unknown = sorted(set(decode) - set(formats))
        if unknown:
            raise ConfigError(f"decode= names cameras {unknown} that the dataset does not have; "
                              f"cameras: {sorted(formats)}")
        choice = {key: decode.get(key, "auto") for key in formats}
    out = {}
    for key, fmt in formats.items():
        want = choice[key]
        if want not in DECODE_CHOICES:
            raise ConfigError(f"decode={want!r} for camera {key!r} is not one of {DECODE_CHOICES}")
        if fmt.depth and want == "gpu":
            raise DeviceError(f"decode='gpu' for camera {key!r}, a depth camera ({fmt.describe()}): NVDEC decodes no "
                              "12-bit grey video; use decode='auto' for it (its codes decode on the CPU, the rest "
                              f"on the GPU), e.g. decode={{'{key}': 'auto', ...}}")
        if fmt.depth:
            out[key] = RouteChoice(DEPTH, f"a depth camera ({fmt.describe()}): its 12-bit codes through PyAV on "
                                               "the workers, as lerobot decodes them (torchcodec gives 8-bit RGB)")
            continue
        if want == "cpu":
            out[key] = RouteChoice(TORCHCODEC, "decode='cpu': torchcodec for every camera")
            continue
        if want == DALI_CPU.choice:
            out[key] = _dali_cpu(key, fmt, node.dali)
            continue
        if want == "cpu-open":
            out[key] = RouteChoice(CPU_OPEN, "decode='cpu-open': FFmpeg's decoders kept open and fed packets (the "
                                               "open-decoder engine on the CPU)")
            continue
        refused = node.nvdec_refuses(fmt)
        doubt = unproven(key) if unproven is not None and want == "auto" and refused is None else None
        slower, note = measured(key) if measured is not None and want == "auto" else (None, "")
        if doubt is not None:
            out[key] = _fallback(fmt, f"NVDEC would decode {fmt.describe()}, but {doubt}")
        elif refused is None and slower is not None:
            out[key] = RouteChoice(TORCHCODEC, f"NVDEC would decode {fmt.describe()}, but torchcodec is faster for "
                                                 f"these samples: {slower}; decode='gpu' insists on NVDEC")
        elif refused is None:
            out[key] = RouteChoice(NVDEC, f"NVDEC on {node.gpu.name if node.gpu else 'the GPU'} decodes "
                                            f"{fmt.describe()}{f' ({note})' if note else ''}")
        elif want == "auto":
            out[key] = _fallback(fmt, refused)
        elif node.gpus == 0:
            raise DeviceError(
                f"decode='gpu' for camera {key!r} ({fmt.codec}) but this node has no CUDA GPU that DALI and torch "
                f"can both use ({refused}); use decode='auto' to decode on CPU here")
        else:
            raise DeviceError(
                f"decode='gpu' for camera {key!r}, but its stream ({fmt.describe()}) is not decodable by NVDEC "
                f"here: {refused}; use decode='auto' (CPU for this camera, the rest on the GPU), or re-encode "
                "the camera as 8-bit 4:2:0 h264/hevc within NVDEC's sizes")
    return out


def nvdec_engine(choice: str, proven_open: str | None) -> tuple[str, str]:
    """("open" or "dali", why) for the NVDEC cameras: `choice` is the `nvdec_engine` setting; `proven_open` says
    why the open engine is not proven on this node yet (None: proven). `auto` keeps DALI's engine until then."""
    if choice == "open":
        return "open", "nvdec_engine='open': PyNvVideoCodec's decoders kept open, fed packets"
    if choice == "dali":
        return "dali", "nvdec_engine='dali': DALI's fn.decoders.video"
    if proven_open is None:
        return "open", "the open-decoder engine is proven on this node (decode/proven.py)"
    return "dali", f"DALI's fn.decoders.video: {proven_open}; nvdec_engine='open' uses the open engine"


def open_routes(choices: Mapping[str, RouteChoice], engine: str, why: str) -> dict[str, RouteChoice]:
    """`choices` with NVDEC cameras on the open-decoder engine when `engine` is "open" (route ``nvdec-open``), their
    reasons naming the engine either way."""
    chosen = NVDEC_OPEN if engine == "open" else NVDEC
    return {key: RouteChoice(chosen, f"{c.reason}; engine: {why}") if c.route == NVDEC else c
            for key, c in choices.items()}


def resolve_routes(formats: Mapping[str, StreamFormat], decode: str | Mapping[str, str], node: Node
                   ) -> dict[str, Route]:
    """Camera key -> route (see `choose_routes` for the reasons)."""
    return {key: c.route for key, c in choose_routes(formats, decode, node).items()}


def mixture_routes(member_choices: Sequence[Mapping[str, RouteChoice]], names: Sequence[str], keys: Sequence[str],
                   decode: str | Mapping[str, str] = "auto") -> dict[str, RouteChoice]:
    """One route per camera key of a mixture, from each member's own choice for its camera under that key (the
    DALI graph decodes a key one way for every sample). Members that agree keep their route, unless it is one
    of DALI's decoders (`Route.in_dali`) and some member lacks the camera: DALI's decoder takes no empty sample.
    Otherwise the key decodes on torchcodec, which takes every codec, and its reason names each member's route;
    where `decode` insisted on the GPU for the key, that is a DeviceError instead."""
    out = {}
    for key in keys:
        have = [(n, c[key]) for n, c in zip(names, member_choices) if key in c]
        lacking = [n for n, c in zip(names, member_choices) if key not in c]
        routes = sorted({c.route for _, c in have}, key=lambda r: r.name)
        said = "; ".join(f"{n}: {c.route} ({c.reason})" for n, c in have)
        if len(routes) == 1 and not (lacking and routes[0].in_dali):
            note = f"; members {lacking} lack it (zeros, with {key + '_is_missing'!r})" if lacking else ""
            if len(have) == 1:
                reason = have[0][1].reason
            elif len({c.reason for _, c in have}) == 1:
                reason = f"every member: {have[0][1].reason}"
            else:
                reason = said
            out[key] = RouteChoice(routes[0], reason + note)
            continue
        why = (f"members {lacking} lack it, and DALI's decoder ({routes[0]}) needs a stream for every sample "
               f"({said})" if len(routes) == 1 else f"its members decode it on different routes ({said}), and one key "
               "decodes one way for every sample")
        want = decode if isinstance(decode, str) else decode.get(key, "auto")
        if want == "gpu":
            raise DeviceError(f"decode='gpu' for camera {key!r}, but {why}; use nvdec_engine='open' (its decoders take "
                              f"samples without a camera), decode={{{key!r}: 'auto'}}, or map the members' cameras to "
                              "different keys with Member(keys={...})")
        out[key] = RouteChoice(TORCHCODEC, f"{why}: torchcodec, which decodes every member's stream")
    return out
