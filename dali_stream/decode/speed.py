"""Which route is faster for a camera's samples, from measurements (each with its source and date, as `gpus`
holds NVDEC's capabilities): `decode="auto"` never takes a GPU route measured slower than the CPU route for
the sample's shape. Pure rules; the loader passes the shape (joined streams or one clip per sample, frames per
sample and camera) and the DALI version.

What is not in the table is not measured: `auto` keeps NVDEC there and says so in its reason, and
`make gpu-check` measures it (`benchmarks/results/<gpu>/`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .route import TORCHCODEC


@dataclass(frozen=True)
class Measured:
    """On DALI `dali` (major.minor), with joined streams or not, for samples of at most `max_frames` frames per
    camera, `faster` beat the other route; `source` says where and when."""

    dali: str
    joined: bool
    max_frames: int
    faster: str  # a route name (decode.route): torchcodec or nvdec
    source: str


MEASURED = (
    Measured("2.4", False, 1, TORCHCODEC.name,
             "DALI 2.4 creates an NVDEC decoder per sample (~8 ms); measured on an H100, 2026-11-23, 640x480 H.264 "
             "GOP 2, one frame per camera: 61.9 samples/s on NVDEC against 165.5 on torchcodec with 2 workers "
             "(benchmarks/results/NVIDIA-H100-80GB-HBM3/)"),
)


def gpu_slower(dali_version: str, joined: bool, frames: int) -> str | None:
    """Why the CPU route is the faster one for this shape (a measurement's source), or None when no measurement
    says so."""
    minor = ".".join(dali_version.split(".")[:2])
    for m in MEASURED:
        if m.dali == minor and m.joined == joined and frames <= m.max_frames and m.faster == TORCHCODEC.name:
            return m.source
    return None


def unmeasured(joined: bool) -> str:
    """The note `auto` adds to an NVDEC choice no measurement covers."""
    what = "joined streams (graph/joined.py)" if joined else "one clip per sample"
    return f"NVDEC with {what} is not measured against torchcodec for this shape yet: `make gpu-check` measures it"
