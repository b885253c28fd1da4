"""Which kinds of stream NVDEC, through DALI's mixed decoder and the clips this version cuts (`PROVEN`), or through
the open-decoder engine on a given GPU (`OPEN_PROVEN`), has been shown to return the planned frames for:
`decode="auto"` sends any other kind to a CPU route and says why. `decode="gpu"` still uses NVDEC where the
capability table (`gpus`) says it can.

A kind is a codec on a DALI minor version, as one clip per sample or as joined streams (`graph.joined`): the two
paths hand NVDEC different streams. An entry is earned by `make gpu-check` on a GPU node: the boundary matrix of
`tests/gpu/test_gpu.py` (every frame of every episode, first and last, windows past both ends, on files written as
lerobot's recorder writes them and as one continuous encode: H.264 with B-frames, HEVC with libx265's open GOPs,
VP9 with alt-ref frames, at GOP 2 and 30) and the fixtures encoded as they are in the wild
(`tests/decode/test_wild_encodings.py`), all checked by painted ids. Enter what passed with its results folder and
date. Whatever changes how clips or joined streams are cut (`graph.clips`, `graph.joined`, `fetch.mp4write`,
`fetch.nal`) voids the entries of the path it changes: remove them in the same commit.

The table is empty: the first GPU run (H100, 2026-11-23, benchmarks/results/NVIDIA-H100-80GB-HBM3/) proved
H.264, HEVC and VP9 on the clips of that day (closed GOPs, no alt-ref frames), and clips have been cut
differently since (an edit list, leading pictures left out, decoder-resetting keyframes only, joined streams).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping


@dataclass(frozen=True)
class Proven:
    """On DALI `dali` (major.minor), `codec` streams cut as joined streams (`joined`) or one clip per sample
    decoded to the planned frames in every check of `source` (a results folder and date)."""

    dali: str
    codec: str
    joined: bool
    source: str


PROVEN: tuple[Proven, ...] = ()


def unproven(dali_version: str, codec: str, joined: bool, table: tuple[Proven, ...] = PROVEN) -> str | None:
    """Why `auto` keeps this kind of stream off NVDEC (None: an entry covers it)."""
    minor = ".".join(dali_version.split(".")[:2])
    if any(p.dali == minor and p.codec == codec and p.joined == joined for p in table):
        return None
    how = "joined streams" if joined else "one clip per sample"
    return (f"NVDEC is not yet proven to return the planned frames for {codec} as {how} on DALI {minor} "
            "(dali_stream/decode/proven.py; `make gpu-check` on a GPU node proves it); decode='gpu' uses NVDEC "
            "anyway")


def rule(formats: Mapping, joined: bool = True, dali_version: str | None = None,
         table: tuple[Proven, ...] = PROVEN) -> Callable[[str], str | None]:
    """`choose_routes`' `unproven` argument: camera key -> why its stream kind is unproven on NVDEC, or None.
    `joined`: NVDEC cameras decode joined streams (the loader's default); `dali_version`: the installed DALI's."""
    version = installed_dali() if dali_version is None else dali_version
    return lambda key: unproven(version, formats[key].codec, joined, table)


def installed_dali() -> str:
    """The installed DALI's version ("0" without one: nothing is proven for it): its flavour's distribution's, read
    without importing DALI (a loader that builds no graph never imports it); else, for a build from source, the
    imported module's."""
    import importlib.metadata as md

    from ..pairing import installed_dali as flavours

    for name in flavours():
        return md.version(name)
    try:
        from nvidia.dali import __version__
    except Exception:
        return "0"
    return str(__version__)


# ---- the open-decoder engine (`decode.engine`, nvdec_engine="open") ----------------------------------------------
@dataclass(frozen=True)
class OpenProven:
    """On GPU `gpu` (its name as torch reports it) the open engine decoded `codec` streams to the planned frames in
    every check of `source` (`make gpu-check`, or a visit's tier 2: the boundary matrix and the wild encodings
    through nvdec-open), and the whole loader on it gave more samples/s than the CPU route on all the node's cores
    for frames of at least `min_pixels` (height x width); smaller frames keep the CPU route under `auto`."""

    gpu: str
    codec: str
    min_pixels: int
    source: str


# Entries are what `benchmarks/gpu_decide.py` prints for a visit's results (one rule: every check passed, and the
# frame sizes from which the loader beat the CPU route), added in the commit that adds those results.
# Empty: on an H200 (2026-11-29, benchmarks/results/NVIDIA-H200/2026-11-29-2/) every frame check passed and the
# loader paid 1.34x the CPU route at 640x480, 1.13x at 256x256, but one check failed (batches waited behind the
# default stream's kernels: a mixture's mask was read back from the GPU, and DALI copied its outputs on the
# caller's stream; since then neither, `loader.deliver`) and HEVC has no ratio: the rule withholds both codecs.
OPEN_PROVEN: tuple[OpenProven, ...] = ()


def open_unproven(gpu_name: str | None, table: tuple[OpenProven, ...] = OPEN_PROVEN) -> str | None:
    """Why `nvdec_engine="auto"` keeps DALI's engine on this GPU (None: the open engine is proven here for some
    kind of stream; `open_rule` then says, camera by camera, where `decode="auto"` takes it)."""
    if any(p.gpu == gpu_name for p in table):
        return None
    return (f"the open-decoder engine is not yet proven on {gpu_name or 'this GPU'} (decode/proven.py; "
            "`make gpu-check` measures and checks it)")


def open_stream_unproven(gpu_name: str | None, codec: str, pixels: int | None,
                         table: tuple[OpenProven, ...] = OPEN_PROVEN) -> str | None:
    """Why `decode="auto"` keeps a camera of `codec` with frames of `pixels` (height x width; None: not stated) off
    the open engine on this GPU (None: an entry proves the stream kind and the frames are as large as measured
    faster than the CPU route)."""
    entries = [p for p in table if p.gpu == gpu_name and p.codec == codec]
    if not entries:
        return (f"the open-decoder engine is not yet proven for {codec} on {gpu_name or 'this GPU'} "
                "(decode/proven.py; `make gpu-check` checks and measures it)")
    least = min(entries, key=lambda p: p.min_pixels)
    if pixels is not None and pixels < least.min_pixels:
        return (f"the whole loader on the open-decoder engine was measured slower than the CPU route on this "
                f"node's cores for {codec} frames under {least.min_pixels:,} pixels on {gpu_name} ({least.source})")
    return None


def open_rule(gpu_name: str | None, formats: Mapping, table: tuple[OpenProven, ...] = OPEN_PROVEN
              ) -> Callable[[str], str | None]:
    """`choose_routes`' `unproven` argument when NVDEC cameras go to the open engine: camera key -> why `auto`
    keeps it on a CPU route (`open_stream_unproven`), or None."""
    def why(key: str) -> str | None:
        fmt = formats[key]
        pixels = fmt.width * fmt.height if fmt.width and fmt.height else None
        return open_stream_unproven(gpu_name, fmt.codec, pixels, table)

    return why
