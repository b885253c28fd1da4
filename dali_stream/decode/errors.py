"""What DALI's video decoder errors mean, and which camera and episode they are about.

DALI reports a decoder failure as a RuntimeError naming the operator, not the sample. `classify` reads the
known messages of DALI 2.4's `fn.decoders.video` (strings of its CPU and mixed backends) into a kind;
`explain_device` turns a failure on batches in flight into a `DeviceError` (this GPU or container) naming the
camera, the episode and the fix; what is about one stream's bytes the batch builder checks on the CPU
(`graph.forensics`), frames the failed batches asked for only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import DaliStreamError, DeviceError

# (kind, patterns) in the order they are tried. Texts as DALI 2.4.0 raises them: each is a string of its
# libdali_operators.so, and the comment names the source file the binary records beside it (DALI's repository,
# dali/operators/video/...). Warnings DALI prints without raising are not here: they never reach an exception.
_KINDS = (
    # dynlink_nvcuvid/dynlink_nvcuvid.cc: the driver's video library does not load (container without the
    # `video` capability); legacy/reader/video_loader.h says it its own way.
    ("nvcuvid", ("dlopen libnvcuvid.so failed", "Failed to load libnvcuvid", "libnvcuvid.so")),
    # dali/core/cuda_error.h formats a failed CUDA call as `CUDA driver API error "CUDA_ERROR_OUT_OF_MEMORY"` or
    # `CUDA runtime API error "cudaErrorMemoryAllocation"`; DALI's allocators raise "CUDA allocation failed" and
    # "Can't allocate N bytes on device D".
    ("out-of-memory", ("CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation", "CUDA allocation failed",
                       "Can't allocate", "out of memory")),
    # frames_decoder_gpu.cc (NVDECCache::GetDecoder, from the parser's sequence callback): NVDEC's caps for
    # the stream's coded size; legacy/reader/nvdecoder/cuvideodecoder.cc words the macroblock limit likewise.
    ("too-small", ("Video is too small in at least one dimension",)),
    ("too-large", ("Video is too large in at least one dimension", "too many macroblocks")),
    # frames_decoder_gpu.cc, same place: `Codec configuration not supported on this GPU. Codec: H.264, chroma
    # format: YUV 4:4:4, bit depth: 8` (a chroma format or bit depth this NVDEC lacks); GetCodecType:
    # "Unsupported codec type"; the legacy reader's nvdecoder.cc: "Decoder hardware does not support ...".
    ("unsupported", ("Codec configuration not supported on this GPU", "Unsupported codec type",
                     "Decoder hardware does not support", "Unsupported Codec")),
    # decoder/video_decoder_base.h (SetupImpl): the frames decoder is not valid, and DALI only printed why as a
    # warning: a codec the GPU variant lacks (frames_decoder_gpu.cc "... is not supported by the GPU variant of
    # this operator"), no 8-bit 4:2:0 NVDEC for it ("Codec X is not supported by NVDEC on this platform"), a
    # codec the CPU variant lacks (frames_decoder_cpu.cc), or bytes FFmpeg cannot open (frames_decoder_base.cc
    # "Failed to open video file from memory buffer due to: ..."). Which one needs the stream itself.
    ("unopened", ("Failed to create video decoder for",)),
    # frames_decoder_base.cc (DecodeFrames, pad_mode="none"): a frame index past what the stream decodes;
    # video_decoder_base.h (SetupImpl): "Start frame 0 is out of bounds for sample #s, expected range [0, 0)"
    # for a stream that decodes no frame.
    ("out-of-bounds", ("out-of-bounds frame index", "is out of bounds for sample #")),
)
_OUT_OF_BOUNDS = (re.compile(r"out-of-bounds frame index (\d+).*?ROI with (\d+) frames", re.DOTALL),
                  re.compile(r"Start frame (\d+) is out of bounds for sample #\d+, expected range \[0, (\d+)\)"))
# The kinds about this GPU or container rather than one stream's bytes (`explain_device`).
DEVICE_KINDS = ("nvcuvid", "out-of-memory", "too-small", "too-large", "unsupported", "unopened")


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
            m = next((m for r in _OUT_OF_BOUNDS if (m := r.search(text))), None) if kind == "out-of-bounds" else None
            return DaliFailure(kind, _telling_line(text, patterns), int(m.group(1)) if m else None,
                               int(m.group(2)) if m else None)
    return DaliFailure("unknown", _telling_line(text))


def reason(text: str) -> str:
    """DALI's reason for a failed operator: the line after its "encountered:" (the rest is its pipeline's traceback),
    else the most telling line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    after = next((lines[n + 1] for n, line in enumerate(lines[:-1]) if line == "encountered:"), None)
    return (after or classify(text).line)[:300]


def stream_format(data: bytes):
    """The `decode.routes.StreamFormat` of an encoded stream in memory, as its container says (None if unreadable)."""
    import io

    import av

    from ..meta.dataset import normalise_codec
    from .node import StreamFormat

    try:
        with av.open(io.BytesIO(data)) as container:
            ctx = container.streams.video[0].codec_context
            return StreamFormat(normalise_codec(ctx.name), ctx.width, ctx.height, ctx.pix_fmt)
    except Exception:
        return None


def explain_device(failure: DaliFailure, cameras: dict[str, list], node) -> DaliStreamError | None:
    """A failure about this GPU or container (not about one stream's bytes), or None.

    `cameras`: NVDEC-routed camera key -> the segments in flight for it."""
    if failure.kind not in DEVICE_KINDS:
        return None
    gpu = node.gpu.name if node is not None and node.gpu is not None else "this GPU"
    keys = sorted(cameras)
    if failure.kind == "nvcuvid":
        from .node import NVDEC_CAPABILITY_FIX

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
    what = {"too-small": "is smaller than NVDEC's minimum", "too-large": "is larger than NVDEC's maximum"}.get(
        failure.kind, "has a codec, profile or pixel format NVDEC does not decode")  # unsupported, unopened
    if culprits:
        key, seg, fmt, why = culprits[0]
        return DeviceError(
            f"NVDEC on {gpu} refused camera {key!r} (episode {seg.episode}, {seg.source}): its stream "
            f"({fmt.describe()}) {what}: {why}. DALI said: {failure.line}. meta/info.json records another "
            f"size or format than the file has: fix info.json's video.* entries, or decode the camera on CPU "
            f"with decode={{{key!r}: 'cpu'}}")
    if failure.kind == "unopened":  # DALI could not open some stream, and none is one this GPU refuses: the data
        return None
    return DeviceError(f"NVDEC on {gpu} refused a stream of cameras {keys}: it {what} ({failure.line}); decode "
                       f"them on CPU with decode={dict.fromkeys(keys, 'cpu')!r}")
