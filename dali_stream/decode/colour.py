"""How a stream's YUV becomes RGB as FFmpeg converts it: the matrix and range (`Colour`), read from the stream as
FFmpeg reads it, for decoders that hand out YUV (NVDEC's NV12 through PyNvVideoCodec: `decode.nv12` converts it with
them), and PyAV's frames converted by FFmpeg with the stream's own tags on every PyAV version (`rgb24`).

Every route must give the same colours: a policy trained on frames one route decoded and run on frames another
route decoded would otherwise see shifted colours (a saturated red moves by ~20 levels between BT.601 and BT.709
coefficients). FFmpeg (torchcodec, PyAV, the `ffmpeg` command) converts with the matrix and range the stream is
tagged with, and an untagged stream (lerobot writes untagged video) with BT.601 in limited range, whatever its
size; PyNvVideoCodec's own RGB output uses BT.709 for untagged video. So NVDEC hands out NV12 and `decode.nv12`
converts it with the matrix and range FFmpeg reads from the same stream (`Colour.of_frame`, a PyAV frame of it).

Checked against FFmpeg's own decode (`tests/decode/test_colour.py`: bars and ramps, untagged and BT.709, limited and
full range, H.264/HEVC/AV1/VP9): at most 2 levels apart on the CPU; `make gpu-check` runs the same check on NVDEC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# (Kr, Kb) of each AVColorSpace swscale has coefficients for (`sws_getCoefficients`); every other value,
# unspecified (2) included, gets BT.601's
_KR_KB = {1: (0.2126, 0.0722), 4: (0.30, 0.11), 7: (0.212, 0.087), 9: (0.2627, 0.0593), 10: (0.2627, 0.0593)}
_BT601 = (0.299, 0.114)


@dataclass(frozen=True)
class Colour:
    """How a stream's YUV becomes RGB: `matrix` (an AVColorSpace value as FFmpeg reads the stream) and
    `full_range` (JPEG range: 0-255 luma; else MPEG range: 16-235)."""

    matrix: int = 2
    full_range: bool = False

    @classmethod
    def of_frame(cls, frame: Any) -> "Colour":
        """The colour of a PyAV `VideoFrame` as FFmpeg would convert it (yuvj formats are full range)."""
        full = int(frame.color_range) == 2 or frame.format.name.startswith("yuvj")
        return cls(int(frame.colorspace), full)

    def coefficients(self) -> tuple[float, float, float, float]:
        """(R from Cr, G from Cb, G from Cr, B from Cb) per unit of centred chroma in 0-255 units."""
        kr, kb = _KR_KB.get(self.matrix, _BT601)
        kg = 1.0 - kr - kb
        return 2 * (1 - kr), -2 * kb * (1 - kb) / kg, -2 * kr * (1 - kr) / kg, 2 * (1 - kb)


# swscale's coefficient tables (`sws_getCoefficients`, SWS_CS_*) by AVColorSpace; every other value gets BT.601's
_SWS_MATRIX = {1: 1, 4: 4, 7: 7, 9: 9, 10: 9}
_SWS_BT601 = 5


def rgb24(frame: Any) -> Any:
    """(H, W, 3) uint8 RGB of a PyAV `VideoFrame`, converted by FFmpeg's swscale with the matrix and range the
    stream is tagged with (`Colour.of_frame`), as the `ffmpeg` command and torchcodec convert it, on every PyAV the
    package allows. PyAV before 16 (lerobot 0.6.1 pins av < 16) converts with BT.601 in limited range whatever the
    tags unless both are passed, and hands them to swscale only where the source's and destination's colorspaces
    differ: the destination's, which an RGB output does not use, is set apart from the source's."""
    if not frame.format.name.startswith(("yuv", "nv")):  # RGB, grey, palette (PNG): no matrix to apply
        return frame.to_ndarray(format="rgb24")
    colour = Colour.of_frame(frame)
    src = _SWS_MATRIX.get(colour.matrix, _SWS_BT601)
    return frame.reformat(format="rgb24", src_colorspace=src, dst_colorspace=_SWS_BT601 if src == 1 else 1,
                          src_color_range=2 if colour.full_range else 1).to_ndarray()
