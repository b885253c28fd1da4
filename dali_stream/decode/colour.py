"""YUV to RGB as FFmpeg converts it: for decoders that hand out YUV (NVDEC's NV12 through PyNvVideoCodec), and
PyAV's frames converted by FFmpeg with the stream's own tags on every PyAV version (`rgb24`).

Every route must give the same colours: a policy trained on frames one route decoded and run on frames another
route decoded would otherwise see shifted colours (a saturated red moves by ~20 levels between BT.601 and BT.709
coefficients). FFmpeg (torchcodec, PyAV, the `ffmpeg` command) converts with the matrix and range the stream is
tagged with, and an untagged stream (lerobot writes untagged video) with BT.601 in limited range, whatever its
size; PyNvVideoCodec's own RGB output uses BT.709 for untagged video. So NVDEC hands out NV12 and this module
converts it: the matrix and range come from FFmpeg's reading of the same stream (`Colour.of_frame`, a PyAV frame
of it), the arithmetic is swscale's (each 2x2 block of pixels shares its chroma sample), in floating point shifted by half
a level to meet swscale's truncating fixed point.

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


def nv12_to_rgb(nv12: Any, height: int, width: int, colour: Colour) -> Any:
    """(..., H, W, 3) uint8 RGB of NV12 pictures, a torch uint8 tensor of (..., H * 3 / 2, W) (luma rows, then rows
    of interleaved Cb, Cr at half resolution: one picture, or a stack of pictures of one stream converted by the
    same launches), on the device it is on; `height`, `width` may be smaller than the pictures' (coded sizes are
    rounded up to whole blocks: the extra rows and columns are cut).

    Chroma stays at half resolution: each channel is luma plus its chroma terms added to every 2x2 block through a
    broadcast view, in one full-size float plane reused by the three channels, so a stack costs about three float
    planes of it (the luma, that plane, the chroma) instead of fifteen (upsampled chroma, each term, the stacked
    channels: an 8-step window chunk at 640x480 held gigabytes per decoder stream). The arithmetic is the same, in
    the same order. A stack is converted `CONVERT_PICTURES` pictures at a time, so those planes are a slice's
    whatever the stack's length."""
    import torch

    lead = tuple(nv12.shape[:-2])
    flat = nv12.reshape(-1, *nv12.shape[-2:])
    out = torch.empty((len(flat), height, width, 3), dtype=torch.uint8, device=nv12.device)
    for start in range(0, len(flat), CONVERT_PICTURES):
        _nv12_to_rgb(flat[start:start + CONVERT_PICTURES], out[start:start + CONVERT_PICTURES], colour)
    return out.reshape(*lead, height, width, 3)


# pictures converted by one set of launches: a 480p slice's float planes are ~20 MB each, and the launches (a few
# dozen) are shared by the slice's pictures
CONVERT_PICTURES = 16


def _nv12_to_rgb(nv12: Any, out: Any, colour: Colour) -> None:
    """`nv12_to_rgb` of a stack (N, H * 3 / 2, W) into `out` (N, height, width, 3)."""
    import torch

    height, width = out.shape[-3:-1]
    rows = nv12.shape[-2] * 2 // 3
    lead = tuple(nv12.shape[:-2])
    half_h, half_w = (height + 1) // 2, (width + 1) // 2
    y = nv12[..., :height, :width].float()
    chroma = nv12[..., rows:rows + half_h, :half_w * 2].reshape(*lead, half_h, half_w, 2).float().sub_(128.0)
    if colour.full_range:
        scale = 1.0
    else:
        y.sub_(16.0).mul_(255.0 / 219.0)
        scale = 255.0 / 224.0
    chroma.mul_(scale)
    cb, cr = chroma[..., 0], chroma[..., 1]
    r_cr, g_cb, g_cr, b_cb = colour.coefficients()
    plane = torch.empty((*lead, 2 * half_h, 2 * half_w), dtype=torch.float32, device=nv12.device)
    blocks = plane.view(*lead, half_h, 2, half_w, 2)  # each 2x2 block of the picture shares its chroma sample
    for k, terms in enumerate((((r_cr, cr),), ((g_cb, cb), (g_cr, cr)), ((b_cb, cb),))):
        plane[..., :height, :width] = y  # an odd size's extra row or column is computed, then cut
        for coefficient, samples in terms:
            blocks.add_((samples * coefficient)[..., :, None, :, None])
        out[..., k] = plane.sub_(0.5).floor_().clamp_(0, 255)[..., :height, :width]


def nv12_of_frame(frame: Any) -> Any:
    """A PyAV yuv420p/yuvj420p frame's planes as one NV12 tensor (H * 3 / 2, W) uint8 on the CPU: what NVDEC hands
    out, for checking `nv12_to_rgb` on any machine."""
    import numpy as np
    import torch

    h, w = frame.height, frame.width
    planes = [np.frombuffer(p, np.uint8).reshape(-1, p.line_size)[:, :n] for p, n in
              zip(frame.planes, (w, (w + 1) // 2, (w + 1) // 2))]
    uv = np.stack((planes[1][:(h + 1) // 2], planes[2][:(h + 1) // 2]), axis=-1).reshape((h + 1) // 2, -1)
    out = np.zeros((h + (h + 1) // 2, max(w, uv.shape[1])), np.uint8)
    out[:h, :w] = planes[0][:h]
    out[h:, :uv.shape[1]] = uv
    return torch.from_numpy(out)
