"""Which decoder handles each camera on this node, and the CPU decoder (torchcodec) itself.

Routes:
- ``nvdec``: DALI ``fn.decoders.video(device="mixed")`` on the GPU (NVDEC), inside the DALI graph.
- ``dali-cpu``: DALI ``fn.decoders.video(device="cpu")``, inside the DALI graph. DALI's CPU decoder
  handles only VP8/VP9/MJPEG (its FFmpeg has no H.264/HEVC/AV1 decoder).
- ``torchcodec``: torchcodec on CPU threads; frames enter the DALI graph through its external source.

``decode`` picks per camera: ``"auto"`` takes NVDEC where this GPU decodes the codec (``gpus``: AV1 only on
GA10x/Ada/Blackwell, not on A100/H100/H200), else DALI's CPU
decoder for VP8/VP9, else torchcodec; ``"gpu"`` demands NVDEC and fails loudly otherwise; ``"cpu"``
uses torchcodec for every codec. A dict maps camera keys to one of those words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .errors import ConfigError, DeviceError
from .gpus import GpuCaps, lookup
from .segments import Segment, decode_error

ROUTES = ("nvdec", "dali-cpu", "torchcodec")
CHOICES = ("auto", "gpu", "cpu")
DALI_CPU_CODECS = frozenset({"vp8", "vp9", "mjpeg"})


@dataclass(frozen=True)
class Node:
    """What this node can decode with: CUDA devices DALI sees, and what the GPU's NVDEC supports."""

    gpus: int
    gpu: GpuCaps | None = None  # capabilities of the GPU this process decodes on (None without GPU)

    @classmethod
    def probe(cls, device_index: int = 0) -> "Node":
        try:
            from nvidia.dali import backend

            count = int(backend.GetCUDADeviceCount())
        except Exception:  # no driver, broken install: the node has no usable GPU for DALI
            count = 0
        if count == 0:
            return cls(gpus=0)
        name, capability = gpu_identity(device_index if device_index < count else 0)
        return cls(gpus=count, gpu=lookup(name, capability))

    def nvdec_decodes(self, codec: str) -> bool:
        return self.gpus > 0 and self.gpu is not None and self.gpu.decodes(codec)


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


def route_reason(codec: str, route: str, node: Node, choice: str) -> str:
    """One line saying why `route` was picked for a camera with `codec` under `choice` on `node`."""
    if choice == "cpu":
        return "decode='cpu': torchcodec for every camera"
    if route == "nvdec":
        return f"NVDEC on {node.gpu.name if node.gpu else 'the GPU'} decodes {codec}"
    gpu_part = node.gpu.why_not(codec) if node.gpus and node.gpu else "no CUDA GPU visible to DALI"
    if route == "dali-cpu":
        return f"{gpu_part}; DALI's CPU decoder handles {codec}"
    return f"{gpu_part}; DALI's CPU decoder has no {codec} (only {', '.join(sorted(DALI_CPU_CODECS))}): torchcodec"


def resolve_routes(codecs: Mapping[str, str], decode: str | Mapping[str, str], node: Node) -> dict[str, str]:
    """Camera key -> route, from each camera's codec, the user's `decode` choice and the node."""
    if isinstance(decode, str):
        choice = {key: decode for key in codecs}
    else:
        unknown = sorted(set(decode) - set(codecs))
        if unknown:
            raise ConfigError(f"decode= names cameras {unknown} that the dataset does not have; cameras: {sorted(codecs)}")
        choice = {key: decode.get(key, "auto") for key in codecs}
    routes = {}
    for key, codec in codecs.items():
        want = choice[key]
        if want not in CHOICES:
            raise ConfigError(f"decode={want!r} for camera {key!r} is not one of {CHOICES}")
        if want == "gpu":
            if node.gpus == 0:
                raise DeviceError(
                    f"decode='gpu' for camera {key!r} ({codec}) but this node has no CUDA GPU that DALI can use "
                    "(no driver, or a CPU-only machine); use decode='auto' to decode on CPU here"
                )
            if not node.nvdec_decodes(codec):
                raise DeviceError(
                    f"decode='gpu' for camera {key!r}, but its codec {codec!r} is not decodable by NVDEC here: "
                    f"{node.gpu.why_not(codec) if node.gpu else 'unknown GPU'}; use decode='auto' (torchcodec on "
                    "CPU for this camera, the rest on the GPU) or re-encode the camera as h264/hevc"
                )
            routes[key] = "nvdec"
        elif want == "cpu":
            routes[key] = "torchcodec"
        elif node.nvdec_decodes(codec):
            routes[key] = "nvdec"
        elif codec in DALI_CPU_CODECS:
            routes[key] = "dali-cpu"
        else:
            routes[key] = "torchcodec"
    return routes


def open_decoder(data: bytes):
    """The torchcodec decoder every CPU decode uses (loader, benchmarks): exact seeking, NHWC frames."""
    from torchcodec.decoders import VideoDecoder

    return VideoDecoder(data, seek_mode="exact", dimension_order="NHWC")


def torchcodec_frames(seg: Segment, indices: np.ndarray) -> np.ndarray:
    """Frames `indices` of the segment as (N, H, W, 3) uint8.

    Decoders are reused across batches: a thread takes an idle decoder of the segment (or opens one), so
    threads decoding the same segment run in parallel (torchcodec releases the GIL; one decoder must not be
    used by two threads at once).
    """
    with seg.lock:
        decoder = seg.idle_decoders.pop() if seg.idle_decoders else None
    try:
        if decoder is None:
            decoder = open_decoder(seg.data)
        batch = decoder.get_frames_at(indices=[int(i) for i in indices])
    except Exception as exc:
        raise decode_error(seg, "torchcodec", exc) from exc
    with seg.lock:
        seg.idle_decoders.append(decoder)
    return batch.data.numpy()


def warm_decoders(seg: Segment, count: int) -> None:
    """Open idle torchcodec decoders on the segment until it has `count` (benchmarks time decode alone)."""
    while True:
        with seg.lock:
            if len(seg.idle_decoders) >= count:
                return
        decoder = open_decoder(seg.data)
        with seg.lock:
            seg.idle_decoders.append(decoder)
