"""What an NVIDIA GPU's video decoder (NVDEC) can do, from its name and compute capability.

Pure data and lookups (standard library only), shared by `decode="auto"` routing and `dali-stream
diagnose`. Table as of 2026-11, from NVIDIA's "Video Encode and Decode GPU Support Matrix"
(developer.nvidia.com/video-encode-decode-support-matrix), the NVDEC Video Decoder API Programming Guide
(Video Codec SDK 13, "Decoder capabilities": minimum/maximum sizes), the board datasheets (engine counts)
and the MIG User Guide ("Supported MIG Profiles": NVDECs per profile).

- Volta (7.0), Turing (7.5), GA100 (8.0) and Hopper (9.0) NVDEC decode H.264, HEVC, VP8, VP9 — not AV1.
- GA10x (8.6, 8.7), Ada (8.9) and Blackwell (10.x, 12.x) NVDEC also decode AV1.
- Sizes: NVDEC refuses streams below a minimum (DALI checks `cuvidGetDecoderCaps`: "Video is too small in
  at least one dimension") or above a maximum, per codec.
- Pixel formats: DALI 2.4's mixed decoder asks NVDEC for 8-bit NV12 output, so only 8-bit 4:2:0 streams
  go to NVDEC; 10-bit or 4:4:4 cameras are decoded by torchcodec.
- Engine counts matter for throughput: one decoder instance runs on one engine. Counts are per CUDA device
  (a multi-GPU board such as the A16 shows its GPUs as separate devices); a MIG slice has the engines of
  its profile, and some small profiles have none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TABLE_DATE = "2026-11"
BASE_CODECS = frozenset({"h264", "hevc", "vp8", "vp9"})
WITH_AV1 = BASE_CODECS | {"av1"}
# 8-bit 4:2:0 (what DALI's mixed decoder hands NVDEC); None = not recorded in the dataset (lerobot writes yuv420p).
NVDEC_PIX_FMTS = frozenset({"yuv420p", "yuvj420p", "nv12"})


@dataclass(frozen=True)
class Generation:
    name: str
    codecs: frozenset  # what NVDEC decodes (through DALI's mixed video decoder)
    h264_max: int = 4096  # largest H.264 width/height; later generations decode 8192


# compute capability (major, minor) -> generation; a major alone matches any minor not listed.
_BY_CAPABILITY = {
    (7, 0): Generation("Volta", BASE_CODECS),
    (7, 2): Generation("Volta (Xavier)", BASE_CODECS),
    (7, 5): Generation("Turing", BASE_CODECS),
    (8, 0): Generation("Ampere GA100", BASE_CODECS),
    (8, 6): Generation("Ampere GA10x", WITH_AV1),
    (8, 7): Generation("Ampere GA10x (Orin)", WITH_AV1),
    (8, 9): Generation("Ada Lovelace", WITH_AV1),
    (9, 0): Generation("Hopper", BASE_CODECS),
    (10, None): Generation("Blackwell", WITH_AV1, h264_max=8192),
    (11, None): Generation("Blackwell", WITH_AV1, h264_max=8192),
    (12, None): Generation("Blackwell", WITH_AV1, h264_max=8192),
}

# (min width, min height, max width, max height) NVDEC accepts per codec; H.264's max is per generation.
SIZE_LIMITS = {"h264": (48, 16, None, None), "hevc": (144, 144, 8192, 8192), "vp8": (48, 16, 4096, 4096),
               "vp9": (128, 128, 8192, 8192), "av1": (128, 128, 8192, 8192)}

# NVDEC engines per CUDA device, by board name. A name matches as whole tokens (so "A2" is not "RTX A2000"
# and "H200" is not "GH200"); the longest matching name wins. Multi-GPU boards list one GPU's engines.
_ENGINES = {
    "GH200": 7, "H200": 7, "H100": 7, "H800": 7, "H20": 7, "B200": 7, "B100": 7, "GB200": 7,
    "A100": 5, "A800": 5, "A30": 4, "A40": 2, "A10G": 1, "A10": 2, "A16": 2, "A2": 1,
    "L40S": 3, "L40": 3, "L20": 3, "L4": 4, "T4": 2, "V100": 1,
    "RTX 6000 Ada": 3, "RTX A6000": 2, "RTX A2000": 1, "RTX 4090": 2, "RTX 4080": 2, "RTX 3090": 1, "RTX 3080": 1,
}

# MIG: NVDEC engines of a slice by (board family, compute slices); "+me" profiles of 1g carry one.
# A100's 1g profiles have none unless they hold two memory slices (1g.10gb on a 40 GB board, 1g.20gb on 80 GB).
_MIG_NVDEC = {
    "A100": {1: 0, 2: 1, 3: 2, 4: 2, 7: 5}, "A800": {1: 0, 2: 1, 3: 2, 4: 2, 7: 5},
    "A30": {1: 0, 2: 2, 4: 4},
    "H100": {1: 1, 2: 2, 3: 3, 4: 4, 7: 7}, "H200": {1: 1, 2: 2, 3: 3, 4: 4, 7: 7},
    "H800": {1: 1, 2: 2, 3: 3, 4: 4, 7: 7}, "H20": {1: 1, 2: 2, 3: 3, 4: 4, 7: 7},
    "GH200": {1: 1, 2: 2, 3: 3, 4: 4, 7: 7},
}
_MIG_RE = re.compile(r"\bMIG\s+(?:\d+c\.)?(\d+)g\.(\d+)gb(\+me)?", re.IGNORECASE)


def _token_match(key: str, name: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", name, re.IGNORECASE) is not None


def board(name: str, table) -> str | None:
    """The longest key of `table` that appears in `name` as whole tokens."""
    hits = [key for key in table if _token_match(key, name)]
    return max(hits, key=len) if hits else None


def mig_profile(name: str) -> str | None:
    """'1g.5gb' (or '1g.5gb+me') when `name` is a MIG device's name, e.g. 'NVIDIA A100-SXM4-40GB MIG 1g.5gb'."""
    m = _MIG_RE.search(name)
    return f"{m.group(1)}g.{m.group(2)}gb{m.group(3) or ''}".lower() if m else None


def mig_nvdec_engines(name: str) -> int | None:
    """NVDEC engines of the MIG slice named `name`; None when unknown (not a MIG name, or not in the table)."""
    m = _MIG_RE.search(name)
    family = board(name, _MIG_NVDEC)
    if m is None or family is None:
        return None
    slices, mem_gb, media = int(m.group(1)), int(m.group(2)), bool(m.group(3))
    engines = _MIG_NVDEC[family].get(slices)
    if engines is None:
        return None
    if slices == 1 and engines == 0 and media:
        engines = 1
    elif slices == 1 and engines == 0:  # a 1g slice holding two of the board's 8 memory slices has one
        board_gb = [int(g) for g in re.findall(r"(\d+)\s*GB", name[:m.start()], re.IGNORECASE)]
        if board_gb and mem_gb * 8 >= 2 * board_gb[-1]:
            engines = 1
    return engines


@dataclass(frozen=True)
class GpuCaps:
    """A GPU (or MIG slice) as the router sees it."""

    name: str
    capability: tuple[int, int] | None  # compute capability, e.g. (9, 0); None when unknown
    generation: str
    nvdec_codecs: frozenset
    nvdec_engines: int | None  # per CUDA device; None when the board is not in the table
    h264_max: int = 4096
    mig: str | None = None  # MIG profile, e.g. "1g.5gb", when this device is a MIG slice

    def _label(self) -> str:
        cap = ".".join(map(str, self.capability)) if self.capability else "?"
        return f"{self.name} ({self.generation}, compute capability {cap})"

    def decodes(self, codec: str) -> bool:
        return codec in self.nvdec_codecs and self.nvdec_engines != 0

    def why_not(self, codec: str) -> str:
        if self.nvdec_engines == 0:
            return (f"{self._label()} is a MIG slice ({self.mig}) with no NVDEC engine; use a profile with media "
                    "extensions (e.g. 1g.5gb+me) or a larger slice")
        return (f"{self._label()} has no NVDEC support for {codec}; NVDEC here decodes "
                f"{', '.join(sorted(self.nvdec_codecs)) or 'nothing known'}")

    def refuses(self, codec: str, width: int | None, height: int | None, pix_fmt: str | None) -> str | None:
        """Why NVDEC cannot decode a `codec` stream of this size and pixel format here; None when it can."""
        if not self.decodes(codec):
            return self.why_not(codec)
        if pix_fmt is not None and pix_fmt not in NVDEC_PIX_FMTS:
            return (f"pixel format {pix_fmt} is not 8-bit 4:2:0 ({', '.join(sorted(NVDEC_PIX_FMTS))}), the only "
                    "output DALI's NVDEC decoder produces")
        lo_w, lo_h, hi_w, hi_h = SIZE_LIMITS.get(codec, (0, 0, None, None))
        hi_w, hi_h = hi_w or self.h264_max, hi_h or self.h264_max
        if width and height:
            if width < lo_w or height < lo_h:
                return f"{width}x{height} is below NVDEC's minimum {lo_w}x{lo_h} for {codec}"
            if width > hi_w or height > hi_h:
                return f"{width}x{height} is above NVDEC's maximum {hi_w}x{hi_h} for {codec} on {self.generation}"
        return None


def lookup(name: str, capability: tuple[int, int] | None) -> GpuCaps:
    """Capabilities of a GPU named `name` with compute capability `capability` (either may be partial)."""
    gen = None
    if capability is not None:
        major, minor = capability
        gen = _BY_CAPABILITY.get((major, minor)) or _BY_CAPABILITY.get((major, None))
    if gen is None:  # unknown or missing capability: be conservative, H.264/HEVC are universal since Maxwell
        gen = Generation("unknown", frozenset({"h264", "hevc"}))
    mig = mig_profile(name)
    engines = mig_nvdec_engines(name) if mig else None
    if engines is None:
        key = board(name, _ENGINES)
        engines = _ENGINES[key] if key else None
        if mig and engines is not None:
            engines = None  # a slice of a known board whose profile is not in the table: count unknown
    return GpuCaps(name=name, capability=(capability[0], capability[1]) if capability else None, generation=gen.name,
                   nvdec_codecs=gen.codecs, nvdec_engines=engines, h264_max=gen.h264_max, mig=mig)
