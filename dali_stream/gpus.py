"""What an NVIDIA GPU's video decoder (NVDEC) can do, from its name and compute capability.

Pure data and lookups (standard library only), shared by `decode="auto"` routing and `dali-stream
diagnose`. Sources: NVIDIA's Video Encode and Decode GPU Support Matrix and the architecture whitepapers.

- Volta (7.0), Turing (7.5), GA100 (8.0) and Hopper (9.0) NVDEC decode H.264, HEVC, VP8 (not Hopper's
  predecessors before Turing), VP9 — but not AV1.
- GA10x (8.6, 8.7), Ada (8.9) and Blackwell (10.x, 12.x) NVDEC also decode AV1.
- Engine counts matter for throughput: one decode session runs on one engine.
"""

from __future__ import annotations

from dataclasses import dataclass

BASE_CODECS = frozenset({"h264", "hevc", "vp8", "vp9"})
WITH_AV1 = BASE_CODECS | {"av1"}


@dataclass(frozen=True)
class Generation:
    name: str
    codecs: frozenset  # what NVDEC decodes (through DALI's mixed video decoder)


# compute capability (major, minor) -> generation; a major alone matches any minor not listed.
_BY_CAPABILITY = {
    (7, 0): Generation("Volta", BASE_CODECS - {"vp8"}),
    (7, 2): Generation("Volta (Xavier)", BASE_CODECS - {"vp8"}),
    (7, 5): Generation("Turing", BASE_CODECS),
    (8, 0): Generation("Ampere GA100", BASE_CODECS),
    (8, 6): Generation("Ampere GA10x", WITH_AV1),
    (8, 7): Generation("Ampere GA10x (Orin)", WITH_AV1),
    (8, 9): Generation("Ada Lovelace", WITH_AV1),
    (9, 0): Generation("Hopper", BASE_CODECS),
    (10, None): Generation("Blackwell", WITH_AV1),
    (11, None): Generation("Blackwell", WITH_AV1),
    (12, None): Generation("Blackwell", WITH_AV1),
}

# NVDEC engines per board, by a substring of the marketing name (first match wins; longest names first).
_ENGINES = (
    ("GH200", 7), ("H200", 7), ("H100", 7), ("H800", 7), ("H20", 7), ("B200", 7), ("B100", 7), ("GB200", 7),
    ("A100", 5), ("A800", 5), ("A30", 4), ("A40", 2), ("A10G", 1), ("A10", 2), ("A16", 4), ("A2", 1),
    ("L40S", 3), ("L40", 3), ("L20", 3), ("L4", 4), ("T4", 2), ("V100", 1),
    ("RTX 6000 Ada", 3), ("RTX 4090", 2), ("RTX 4080", 2), ("RTX 3090", 1), ("RTX 3080", 1),
)


@dataclass(frozen=True)
class GpuCaps:
    """A GPU as the router sees it."""

    name: str
    capability: tuple[int, int] | None  # compute capability, e.g. (9, 0); None when unknown
    generation: str
    nvdec_codecs: frozenset
    nvdec_engines: int | None  # None when the board is not in the table

    def decodes(self, codec: str) -> bool:
        return codec in self.nvdec_codecs

    def why_not(self, codec: str) -> str:
        return (f"{self.name} ({self.generation}, compute capability "
                f"{'.'.join(map(str, self.capability)) if self.capability else '?'}) has no NVDEC support for "
                f"{codec}; NVDEC here decodes {', '.join(sorted(self.nvdec_codecs)) or 'nothing known'}")


def lookup(name: str, capability: tuple[int, int] | None) -> GpuCaps:
    """Capabilities of a GPU named `name` with compute capability `capability` (either may be partial)."""
    gen = None
    if capability is not None:
        gen = _BY_CAPABILITY.get(tuple(capability)) or _BY_CAPABILITY.get((capability[0], None))
    if gen is None:  # unknown or missing capability: be conservative, H.264/HEVC are universal since Maxwell
        gen = Generation("unknown", frozenset({"h264", "hevc"}))
    engines = next((n for key, n in _ENGINES if key.lower() in name.lower()), None)
    return GpuCaps(name=name, capability=tuple(capability) if capability else None, generation=gen.name,
                   nvdec_codecs=gen.codecs, nvdec_engines=engines)
