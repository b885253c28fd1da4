"""The float conversion of NV12 to RGB that `decode.nv12`'s integer one replaced (three float planes of a slice of
16 pictures): the reference the new one is held to within 1 level of, in tests and `benchmarks/nv12_conversion.py`."""

from __future__ import annotations

from typing import Any

from dali_stream.decode.colour import Colour


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
