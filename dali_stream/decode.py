"""Which decoder handles each camera on this node, and the CPU decoder (torchcodec) itself.

Routes:
- ``nvdec``: DALI ``fn.decoders.video(device="mixed")`` on the GPU (NVDEC), inside the DALI graph.
- ``dali-cpu``: DALI ``fn.decoders.video(device="cpu")``, inside the DALI graph. DALI's CPU decoder
  handles only VP8/VP9/MJPEG (its FFmpeg has no H.264/HEVC/AV1 decoder).
- ``torchcodec``: torchcodec on CPU threads; frames enter the DALI graph through its external source.

``decode`` picks per camera: ``"auto"`` takes NVDEC where the GPU decodes the codec, else DALI's CPU
decoder for VP8/VP9, else torchcodec; ``"gpu"`` demands NVDEC and fails loudly otherwise; ``"cpu"``
uses torchcodec for every codec. A dict maps camera keys to one of those words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .errors import ConfigError, DeviceError
from .segments import Segment, decode_error

ROUTES = ("nvdec", "dali-cpu", "torchcodec")
CHOICES = ("auto", "gpu", "cpu")
DALI_CPU_CODECS = frozenset({"vp8", "vp9", "mjpeg"})
# NVDEC codecs every data-centre GPU since Turing decodes; AV1 needs GA10x/Ada/Blackwell (see issue 4).
NVDEC_CODECS = frozenset({"h264", "hevc", "vp8", "vp9"})


@dataclass(frozen=True)
class Node:
    """What this node can decode with: number of CUDA devices DALI sees."""

    gpus: int

    @classmethod
    def probe(cls) -> "Node":
        try:
            from nvidia.dali import backend

            return cls(gpus=int(backend.GetCUDADeviceCount()))
        except Exception:  # no driver, broken install: the node has no usable GPU for DALI
            return cls(gpus=0)


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
            if codec not in NVDEC_CODECS:
                raise DeviceError(
                    f"decode='gpu' for camera {key!r}, but its codec {codec!r} is not decodable by NVDEC through "
                    f"DALI on this node (NVDEC here: {sorted(NVDEC_CODECS)}); use decode='auto' (CPU for this "
                    "camera) or re-encode it as h264/hevc"
                )
            routes[key] = "nvdec"
        elif want == "cpu":
            routes[key] = "torchcodec"
        elif node.gpus > 0 and codec in NVDEC_CODECS:
            routes[key] = "nvdec"
        elif codec in DALI_CPU_CODECS:
            routes[key] = "dali-cpu"
        else:
            routes[key] = "torchcodec"
    return routes


def torchcodec_frames(seg: Segment, indices: np.ndarray) -> np.ndarray:
    """Frames `indices` of the segment as (N, H, W, 3) uint8, reusing one decoder per segment."""
    from torchcodec.decoders import VideoDecoder

    with seg.lock:
        try:
            if seg.decoder is None:
                seg.decoder = VideoDecoder(seg.data, seek_mode="exact", dimension_order="NHWC")
            batch = seg.decoder.get_frames_at(indices=[int(i) for i in indices])
        except Exception as exc:
            raise decode_error(seg, "torchcodec", exc) from exc
    return batch.data.numpy()
