"""Which decoder handles each camera on this node (the CPU decoder itself is `decode.cpu`).

Routes:
- ``nvdec``: DALI ``fn.decoders.video(device="mixed")`` on the GPU (NVDEC), inside the DALI graph.
- ``dali-cpu``: DALI ``fn.decoders.video(device="cpu")``, inside the DALI graph. DALI's CPU decoder
  handles only VP8/VP9/MJPEG (its FFmpeg has no H.264/HEVC/AV1 decoder).
- ``torchcodec``: torchcodec on CPU threads; frames enter the DALI graph through its external source.
- ``nvdec-open``: NVDEC through PyNvVideoCodec's decoders kept open and fed packets (`decode.engine`), chosen for
  NVDEC cameras by ``nvdec_engine`` (`nvdec_engine`); frames enter the graph through an external source on the GPU.
- ``cpu-open``: the same engine on FFmpeg's CPU decoders (PyAV), ``decode="cpu-open"``: the reference the NVDEC
  engine is checked against, on any node.

``decode`` picks per camera: ``"auto"`` takes NVDEC where this node's NVDEC takes the camera's stream
(codec, size and pixel format against ``gpus``' table) unless a measurement says torchcodec is faster for the
camera's samples (``speed``), else DALI's CPU decoder for VP8/VP9, else torchcodec; ``"gpu"`` demands NVDEC and fails loudly otherwise; ``"cpu"`` uses torchcodec for every codec.
A dict maps camera keys to one of those words.

The node (`Node`) is built from probe results (`NodeFacts`) by pure rules, so routing on an H100, a MIG
slice or a container without NVDEC is testable anywhere: a GPU counts only when DALI and torch both use
it, NVDEC only when libnvcuvid loads and the GPU (or MIG slice) has engines.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..config import DECODE_CHOICES
from ..errors import ConfigError, DeviceError
from .gpus import GpuCaps, lookup
from .route import CPU_OPEN, DALI_CPU, NVDEC, NVDEC_OPEN, TORCHCODEC, route

DALI_CPU_CODECS: frozenset[str] = DALI_CPU.codecs or frozenset()  # what DALI's CPU decoder takes (`Route.codecs`)
ENV_CPU_ONLY = "DALI_STREAM_CPU_ONLY"  # "1": behave as on a node without GPU (CPU routes, batches on CPU)
NVDEC_CAPABILITY_FIX = ("in a container, expose the driver's video capability: NVIDIA_DRIVER_CAPABILITIES="
                        "compute,video,utility (or all), e.g. "
                        "`docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=all`")


@dataclass(frozen=True)
class StreamFormat:
    """What routing needs to know of a camera's stream (from meta/info.json or the file itself)."""

    codec: str
    width: int | None = None
    height: int | None = None
    pix_fmt: str | None = None  # None: not recorded (lerobot records yuv420p)

    def describe(self) -> str:
        size = f" {self.width}x{self.height}" if self.width and self.height else ""
        return f"{self.codec}{size}{f' {self.pix_fmt}' if self.pix_fmt else ''}"


@dataclass(frozen=True)
class NodeFacts:
    """What the probes found on this node; `Node.from_facts` turns them into routing decisions (pure)."""

    dali_devices: int = 0  # CUDA devices DALI's backend sees
    torch_devices: int = 0  # CUDA devices torch can use (0 with a CPU-only build or a too-old driver)
    torch_version: str | None = None
    torch_cuda: str | None = None  # the CUDA version torch was built for; None for a CPU-only build
    gpu_name: str = "unknown"  # the device this process decodes on
    capability: tuple[int, int] | None = None
    nvcuvid_error: str | None = None  # why libnvcuvid (NVDEC's driver library) does not load; None: it loads
    cpu_only: bool = False  # DALI_STREAM_CPU_ONLY=1
    dali: bool = True  # NVIDIA DALI is installed (False: the CPU install, `pairing.dali_present`)


@dataclass(frozen=True)
class Node:
    """What this node can decode with: CUDA devices DALI and torch both use, and what the GPU's NVDEC supports.

    `gpus` counts devices usable for decode and batches (0: CPU routes only). `gpu_problem` says why GPUs
    that are present are not used; `nvdec_problem` why NVDEC is not used although the GPU is."""

    gpus: int
    gpu: GpuCaps | None = None  # capabilities of the GPU this process decodes on (None without GPU)
    gpu_problem: str | None = None
    nvdec_problem: str | None = None
    facts: NodeFacts | None = field(default=None, compare=False)
    dali: bool = True  # NVIDIA DALI is installed: its CPU decoder can take VP8/VP9/MJPEG cameras

    @classmethod
    def probe(cls, device_index: int = 0) -> "Node":
        return cls.from_facts(probe_facts(device_index))

    @classmethod
    def from_facts(cls, f: NodeFacts) -> "Node":
        if f.cpu_only:
            return cls(0, gpu_problem=f"{ENV_CPU_ONLY}=1 is set: GPUs are not used", facts=f, dali=f.dali)
        if not f.dali:
            return cls(0, gpu_problem=(f"torch sees {f.torch_devices} CUDA device(s), but NVIDIA DALI is not installed "
                                       "(the CPU install): pip install 'dali-stream[cu12]' or '[cu13]' (docs/install.md)"
                                       if f.torch_devices else None), facts=f, dali=False)
        if f.dali_devices == 0:
            problem = None
            if f.torch_devices:
                problem = (f"torch sees {f.torch_devices} CUDA device(s) but DALI sees none: the DALI build does not "
                           "match the driver (nvidia-dali-cuda120 needs driver >= 525, -cuda130 >= 580); see "
                           "`dali-stream diagnose`")
            return cls(0, gpu_problem=problem, facts=f)
        if f.torch_devices == 0:
            build = ("a CPU-only build" if f.torch_cuda is None else
                     f"built for CUDA {f.torch_cuda}, which this driver does not run")
            return cls(0, gpu_problem=(
                f"DALI sees {f.dali_devices} CUDA device(s) but torch {f.torch_version or '?'} cannot use them "
                f"({build}); batches could not reach torch, so every camera decodes on CPU. Install a CUDA "
                "build of torch that this driver runs (docs/install.md; `dali-stream diagnose` names the set)"),
                facts=f)
        if f.torch_devices != f.dali_devices:
            return cls(0, gpu_problem=(
                f"DALI sees {f.dali_devices} CUDA device(s) and torch sees {f.torch_devices}: they would number "
                "devices differently, so every camera decodes on CPU. Set CUDA_VISIBLE_DEVICES before the "
                "process starts (not after importing torch or DALI)"), facts=f)
        caps = lookup(f.gpu_name, f.capability)
        nvdec_problem = None
        if f.nvcuvid_error is not None:
            nvdec_problem = (f"libnvcuvid (NVDEC's driver library) does not load ({f.nvcuvid_error}); "
                             + NVDEC_CAPABILITY_FIX)
        elif caps.nvdec_engines == 0:
            nvdec_problem = caps.why_not("any codec")
        return cls(f.dali_devices, caps, None, nvdec_problem, facts=f)

    def nvdec_refuses(self, fmt: StreamFormat) -> str | None:
        """Why NVDEC cannot take this stream on this node; None when it can."""
        if self.gpus == 0 or self.gpu is None:
            return self.gpu_problem or ("no CUDA GPU visible to DALI" if self.dali else
                                        "no GPU decoding without NVIDIA DALI (the CPU install)")
        if self.nvdec_problem:
            return self.nvdec_problem
        return self.gpu.refuses(fmt.codec, fmt.width, fmt.height, fmt.pix_fmt)

    def nvdec_decodes(self, codec: str | StreamFormat) -> bool:
        fmt = codec if isinstance(codec, StreamFormat) else StreamFormat(codec)
        return self.nvdec_refuses(fmt) is None


# ---- probes (the only IO here) ----------------------------------------------------------------------------
def _dali_device_count() -> int:
    try:
        from nvidia.dali import backend

        return int(backend.GetCUDADeviceCount())
    except Exception:  # no driver, broken install: the node has no usable GPU for DALI
        return 0


def _torch_cuda() -> tuple[int, str | None, str | None]:
    """(devices torch can use, torch version, CUDA version torch was built for)."""
    try:
        import torch
    except Exception:
        return 0, None, None
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        count = 0
    return count, torch.__version__, torch.version.cuda


def nvcuvid_error() -> str | None:
    """None when libnvcuvid loads (NVDEC usable from this process); else why not."""
    import ctypes

    errors = []
    for name in ("libnvcuvid.so.1", "libnvcuvid.so"):
        try:
            ctypes.CDLL(name)
            return None
        except OSError as exc:
            errors.append(str(exc))
    return errors[0]


def probe_facts(device_index: int = 0) -> NodeFacts:
    from ..pairing import dali_present

    present = dali_present()
    cpu_only = os.environ.get(ENV_CPU_ONLY, "").strip().lower() in ("1", "true", "yes")
    if cpu_only:
        return NodeFacts(cpu_only=True, dali=present)
    dali = _dali_device_count() if present else 0
    torch_devices, torch_version, torch_cuda = _torch_cuda()
    if dali == 0:
        return NodeFacts(0, torch_devices, torch_version, torch_cuda, dali=present)
    name, capability = gpu_identity(device_index if device_index < dali else 0)
    return NodeFacts(dali, torch_devices, torch_version, torch_cuda, name, capability, nvcuvid_error())


def gpu_identity(index: int = 0) -> tuple[str, tuple[int, int] | None]:
    """(name, compute capability) of CUDA device `index`, from torch, else nvidia-smi; ("unknown", None)."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(index), tuple(torch.cuda.get_device_capability(index))
    except Exception:
        pass
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        name, cap = (part.strip() for part in out.split(",", 1))
        major, minor = cap.split(".")
        return name, (int(major), int(minor))
    except Exception:
        return "unknown", None


_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """One UserWarning per distinct message per process."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)


# ---- routing ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RouteChoice:
    route: str  # a name of `decode.route.ROUTES`
    reason: str  # one line: why this route on this node


def _fallback(fmt: StreamFormat, why_not_nvdec: str, dali: bool = True) -> RouteChoice:
    if DALI_CPU.takes(fmt.codec) and dali:
        return RouteChoice(DALI_CPU.name, f"{why_not_nvdec}; DALI's CPU decoder handles {fmt.codec}")
    if DALI_CPU.takes(fmt.codec):
        return RouteChoice(TORCHCODEC.name, f"{why_not_nvdec}; NVIDIA DALI is not installed (the CPU install): "
                                         "torchcodec")
    return RouteChoice(TORCHCODEC.name, f"{why_not_nvdec}; DALI's CPU decoder has no {fmt.codec} "
                                     f"(only {', '.join(sorted(DALI_CPU_CODECS))}): torchcodec")


def formats_of(meta) -> dict[str, StreamFormat]:
    """Each camera's stream format as the dataset's meta/info.json records it."""
    return {k: StreamFormat(c.codec, c.width or None, c.height or None, c.pix_fmt) for k, c in meta.cameras.items()}


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
        if want == "cpu":
            out[key] = RouteChoice(TORCHCODEC.name, "decode='cpu': torchcodec for every camera")
            continue
        if want == "cpu-open":
            out[key] = RouteChoice(CPU_OPEN.name, "decode='cpu-open': FFmpeg's decoders kept open and fed packets (the "
                                               "open-decoder engine on the CPU)")
            continue
        refused = node.nvdec_refuses(fmt)
        doubt = unproven(key) if unproven is not None and want == "auto" and refused is None else None
        slower, note = measured(key) if measured is not None and want == "auto" else (None, "")
        if doubt is not None:
            out[key] = _fallback(fmt, f"NVDEC would decode {fmt.describe()}, but {doubt}", node.dali)
        elif refused is None and slower is not None:
            out[key] = RouteChoice(TORCHCODEC.name, f"NVDEC would decode {fmt.describe()}, but torchcodec is faster for "
                                                 f"these samples: {slower}; decode='gpu' insists on NVDEC")
        elif refused is None:
            out[key] = RouteChoice(NVDEC.name, f"NVDEC on {node.gpu.name if node.gpu else 'the GPU'} decodes "
                                            f"{fmt.describe()}{f' ({note})' if note else ''}")
        elif want == "auto":
            out[key] = _fallback(fmt, refused, node.dali)
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
    name = NVDEC_OPEN.name if engine == "open" else NVDEC.name
    return {key: RouteChoice(name, f"{c.reason}; engine: {why}") if c.route == NVDEC.name else c
            for key, c in choices.items()}


def resolve_routes(formats: Mapping[str, StreamFormat], decode: str | Mapping[str, str], node: Node) -> dict[str, str]:
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
        routes = sorted({c.route for _, c in have})
        said = "; ".join(f"{n}: {c.route} ({c.reason})" for n, c in have)
        if len(routes) == 1 and not (lacking and route(routes[0]).in_dali):
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
        out[key] = RouteChoice(TORCHCODEC.name, f"{why}: torchcodec, which decodes every member's stream")
    return out
