"""What DALI's video decoder errors mean, and which camera and episode they are about.

DALI reports a decoder failure as a RuntimeError naming the operator, not the sample. `classify` reads the
known messages of DALI 2.4's `fn.decoders.video` (strings of its CPU and mixed backends) into a kind;
`explain` turns a failure on batches in flight into a `DecodeError` (the stream) or `DeviceError` (this
GPU or container) naming the camera, the episodes and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import DaliStreamError, DeviceError

# (kind, patterns) in the order they are tried; texts as DALI 2.4.0 prints them.
_KINDS = (
    ("nvcuvid", ("Failed to load libnvcuvid", "libnvcuvid.so")),
    ("out-of-memory", ("out of memory", "CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation",
                       "Can't allocate")),
    ("too-small", ("too small in at least one dimension",)),
    ("too-large", ("too large in at least one dimension", "too many macroblocks")),
    ("unsupported", ("is not supported by NVDEC", "Decoder hardware does not support", "Unsupported Codec",
                     "Unsupported codec type", "not supported by the GPU variant", "not supported by the CPU variant")),
    ("out-of-bounds", ("out-of-bounds frame index",)),
)
_OUT_OF_BOUNDS = re.compile(r"out-of-bounds frame index (\d+).*?ROI with (\d+) frames", re.DOTALL)


@dataclass(frozen=True)
class DaliFailure:
    kind: str  # one of _KINDS' names, or "unknown"
    line: str  # DALI's most telling line
    frame: int | None = None  # out-of-bounds: the index asked for
    frames: int | None = None  # out-of-bounds: the frames DALI found in the stream


def _telling_line(text: str, patterns=()) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if any(p.lower() in line.lower() for p in patterns):
            return line[:300]
    return next((line for line in lines if "failed" in line.lower() or "error" in line.lower()),
                lines[0] if lines else "no message")[:300]


def classify(text: str) -> DaliFailure:
    lowered = text.lower()
    for kind, patterns in _KINDS:
        if any(p.lower() in lowered for p in patterns):
            m = _OUT_OF_BOUNDS.search(text) if kind == "out-of-bounds" else None
            return DaliFailure(kind, _telling_line(text, patterns), int(m.group(1)) if m else None,
                               int(m.group(2)) if m else None)
    return DaliFailure("unknown", _telling_line(text))


def stream_format(data: bytes):
    """The `decode.routes.StreamFormat` of an encoded stream in memory, as its container says (None if unreadable)."""
    import io

    import av

    from ..meta import normalise_codec
    from .routes import StreamFormat

    try:
        with av.open(io.BytesIO(data)) as container:
            ctx = container.streams.video[0].codec_context
            return StreamFormat(normalise_codec(ctx.name), ctx.width, ctx.height, ctx.pix_fmt)
    except Exception:
        return None


def explain_device(failure: DaliFailure, cameras: dict[str, list], node) -> DaliStreamError | None:
    """A failure about this GPU or container (not about one stream's bytes), or None.

    `cameras`: NVDEC-routed camera key -> the segments in flight for it."""
    if failure.kind not in ("nvcuvid", "out-of-memory", "too-small", "too-large", "unsupported"):
        return None
    gpu = node.gpu.name if node is not None and node.gpu is not None else "this GPU"
    keys = sorted(cameras)
    if failure.kind == "nvcuvid":
        from .routes import NVDEC_CAPABILITY_FIX

        return DeviceError(f"NVDEC is not usable in this process ({failure.line}): libnvcuvid, the driver's video "
                           f"library, is missing; {NVDEC_CAPABILITY_FIX}; or decode on CPU with decode='cpu'")
    if failure.kind == "out-of-memory":
        return DeviceError(f"{gpu} ran out of memory while decoding cameras {keys} ({failure.line}); lower "
                           "batch_size or the window lengths in delta_timestamps, decode some cameras on CPU "
                           "(decode={camera: 'cpu'}), or free GPU memory (see nvidia-smi for other processes)")
    # A stream NVDEC refuses: find the camera whose real stream this GPU cannot take.
    culprits = []
    for key, segs in cameras.items():
        for seg in segs:
            fmt = stream_format(seg.data)
            why = node.gpu.refuses(fmt.codec, fmt.width, fmt.height, fmt.pix_fmt) if fmt and node and node.gpu else None
            if why:
                culprits.append((key, seg, fmt, why))
                break
    what = {"too-small": "is smaller than NVDEC's minimum", "too-large": "is larger than NVDEC's maximum",
            "unsupported": "has a codec, profile or pixel format NVDEC does not decode"}[failure.kind]
    if culprits:
        key, seg, fmt, why = culprits[0]
        return DeviceError(
            f"NVDEC on {gpu} refused camera {key!r} (episode {seg.episode}, {seg.source}): its stream "
            f"({fmt.describe()}) {what}: {why}. DALI said: {failure.line}. meta/info.json records another "
            f"size or format than the file has: fix info.json's video.* entries, or decode the camera on CPU "
            f"with decode={{{key!r}: 'cpu'}}")
    return DeviceError(f"NVDEC on {gpu} refused a stream of cameras {keys}: it {what} ({failure.line}); decode "
                       f"them on CPU with decode={dict.fromkeys(keys, 'cpu')!r}")
