"""NVDEC's NV12 pictures to RGB, with the matrix and range FFmpeg converts the stream with (`decode.colour.Colour`), in
HWC or CHW and uint8 or float32 in [0, 1] (torch's `frames.float() / 255` on the same device). The open engine takes
HWC uint8, what the DALI graph's external source is fed (`packet_decoders.NvdecPacketDecoder`); the other layouts and
dtypes are there for a batch laid out without the graph.

One formula in integers, two ways to run it:
- **fused** (CUDA, even sizes): one elementwise kernel over the uint8 planes, compiled by torch's jiterator on first
  use of each dtype in a process (NVRTC, which torch's CUDA builds carry: no compiler on the node). Each output element
  reads its luma sample and its 2x2 block's chroma pair through broadcast views and writes the batch's element: no
  temporary at all, one launch a stack. Checked against the portable form on the first stack of each layout and dtype
  it converts; a kernel that does not build, launch or agree is set aside for the process with a warning saying why,
  and the portable form converts (running out of memory is raised as it is).
- **portable** (any device, the CPU's tests): the same integer arithmetic in torch operations, over bands of at most
  `BAND_BYTES` of 32-bit values (a few pictures, or rows of one), so the temporaries are a few bands whatever the
  stack's length or the pictures' size.

The arithmetic is swscale's in fixed point with `SHIFT` fraction bits: luma `(Y - 16) * 255 / 219` (limited range),
chroma `(C - 128) * 255 / 224` times the matrix's coefficient, each 2x2 block of pixels sharing its chroma sample,
the sum less half a level, floored and clamped to 0-255. The floating-point conversion it replaced (three float
planes of a slice of 16 pictures) is within 1 level of it on random pictures (`tests/decode/test_nv12.py`) and
on the colour check's (`tests/decode/test_colour.py`), which also holds it within 2 of FFmpeg's own decode.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, Literal

from .colour import Colour

SHIFT = 16  # fraction bits: each coefficient within 2**-17 of swscale's, so a sum moves by < 0.004 of a level
# 32-bit values in one band of the portable form: its temporaries are about three bands (the luma, the channel being
# summed, the chroma) whatever the stack
BAND_BYTES = 4 << 20

Layout = Literal["hwc", "chw"]


def fixed_point(colour: Colour) -> tuple[int, int, int, int, int, int]:
    """(luma scale, luma offset, R from Cr, G from Cb, G from Cr, B from Cb) of `colour` as integers with `SHIFT`
    fraction bits: a channel is `(Y - offset) * scale + Cb * a + Cr * b` over centred chroma."""
    one = 1 << SHIFT
    scale, offset, chroma = (one, 0, 1.0) if colour.full_range else (round(255 / 219 * one), 16, 255 / 224)
    r_cr, g_cb, g_cr, b_cb = (round(c * chroma * one) for c in colour.coefficients())
    return scale, offset, r_cr, g_cb, g_cr, b_cb


def nv12_to_rgb(nv12: Any, height: int, width: int, colour: Colour, layout: Layout = "hwc",
                dtype: Any = None, fused: bool | None = None) -> Any:
    """RGB of NV12 pictures: a torch uint8 tensor (..., H * 3 / 2, W) (luma rows, then rows of interleaved Cb, Cr at
    half resolution: one picture, or a stack of one stream's), on the device it is on. Returns (..., height, width, 3)
    for `layout` "hwc", (..., 3, height, width) for "chw"; uint8, or `dtype` torch.float32 for values / 255.
    `height`, `width` may be smaller than the pictures' (coded sizes round up to whole blocks: the rest is cut).
    `fused`: None takes the fused kernel where it runs (CUDA, an even size), True insists, False takes the portable
    form."""
    import torch

    if layout not in ("hwc", "chw"):
        raise ValueError(f"layout={layout!r}: 'hwc' or 'chw'")
    dtype = torch.uint8 if dtype is None else dtype
    if dtype not in (torch.uint8, torch.float32):
        raise ValueError(f"dtype={dtype}: torch.uint8 or torch.float32")
    lead = tuple(nv12.shape[:-2])
    flat = nv12.reshape(-1, *nv12.shape[-2:])
    rows = flat.shape[-2] * 2 // 3
    if height > rows or width > flat.shape[-1]:
        raise ValueError(f"NV12 pictures of shape {tuple(nv12.shape)} cannot give {height}x{width}")
    shape = (len(flat), height, width, 3) if layout == "hwc" else (len(flat), 3, height, width)
    if fused is not False and _FUSED.usable(flat, height, width, fused):
        out = _FUSED.convert(flat, height, width, colour, layout, dtype, fused)
    else:
        out = torch.empty(shape, dtype=dtype, device=nv12.device)
        _portable(flat, out, colour, layout)
    return out.reshape(*lead, *shape[1:])


def _portable(nv12: Any, out: Any, colour: Colour, layout: Layout) -> None:
    """The portable form into `out`: bands of whole pictures where one fits `BAND_BYTES`, else of rows of one."""
    n = len(nv12)
    height, width = (int(v) for v in (out.shape[1:3] if layout == "hwc" else out.shape[2:4]))
    half_h, half_w = (height + 1) // 2, (width + 1) // 2
    picture = 4 * 4 * half_h * half_w
    if picture <= BAND_BYTES:
        step = max(1, BAND_BYTES // picture)
        for p in range(0, n, step):
            _band(nv12[p:p + step], out[p:p + step], colour, layout, 0, half_h)
        return
    pairs = max(1, BAND_BYTES // (4 * 4 * half_w))  # pairs of rows a band holds
    for p in range(n):
        for first in range(0, half_h, pairs):
            _band(nv12[p:p + 1], out[p:p + 1], colour, layout, first, min(half_h, first + pairs))


def _band(nv12: Any, out: Any, colour: Colour, layout: Layout, first: int, end: int) -> None:
    """Rows `2 * first` to `2 * end` (chroma rows `first` to `end`) of pictures `nv12` into `out`."""
    import torch

    n = len(nv12)
    height, width = out.shape[1:3] if layout == "hwc" else out.shape[2:4]
    rows = nv12.shape[-2] * 2 // 3
    half_w = (width + 1) // 2
    top, bottom = 2 * first, min(height, 2 * end)
    scale, offset, r_cr, g_cb, g_cr, b_cb = fixed_point(colour)
    device = nv12.device
    shape = (n, 2 * (end - first), 2 * half_w)  # whole 2x2 blocks: an odd size's extra row or column is cut after
    luma = (torch.zeros if shape[1:] != (bottom - top, width) else torch.empty)(shape, dtype=torch.int32, device=device)
    luma[:, :bottom - top, :width] = nv12[:, top:bottom, :width]
    luma.sub_(offset).mul_(scale).sub_(1 << (SHIFT - 1))  # less half a level: floor(x - 0.5) as swscale truncates
    chroma = nv12[:, rows + first:rows + end, :2 * half_w].reshape(n, end - first, half_w, 2).to(torch.int32).sub_(128)
    cb, cr = chroma[..., 0], chroma[..., 1]
    term = torch.empty((n, end - first, half_w), dtype=torch.int32, device=device)
    plane = torch.empty_like(luma)
    blocks, luma_blocks = (t.view(n, end - first, 2, half_w, 2) for t in (plane, luma))
    for k, (a, b) in enumerate(((0, r_cr), (g_cb, g_cr), (b_cb, 0))):
        torch.mul(cb, a, out=term)
        term.add_(cr, alpha=b)
        torch.add(luma_blocks, term[:, :, None, :, None], out=blocks)
        plane.clamp_(0, (256 << SHIFT) - 1).bitwise_right_shift_(SHIFT)
        channel = out[:, top:bottom, :, k] if layout == "hwc" else out[:, k, top:bottom]
        if out.dtype == torch.uint8:
            channel.copy_(plane[:, :bottom - top, :width])
        else:
            torch.div(plane[:, :bottom - top, :width], 255.0, out=channel)


# One output element: its luma sample, its block's Cb and Cr, its channel (0, 1, 2) as broadcast inputs; the
# integers of `fixed_point` as arguments. The same arithmetic as `_band`, in 32-bit integers.
_KERNEL = """
template <typename T> T nv12_rgb(T y, T cb, T cr, T channel, int scale, int offset, int r_cr, int g_cb, int g_cr,
                                 int b_cb, int shift, int normalise) {
  int k = (int) channel;
  int a = k == 0 ? 0 : (k == 1 ? g_cb : b_cb);
  int b = k == 0 ? r_cr : (k == 1 ? g_cr : 0);
  int v = ((int) y - offset) * scale + a * ((int) cb - 128) + b * ((int) cr - 128) - (1 << (shift - 1));
  v = v < 0 ? 0 : v >> shift;
  v = v > 255 ? 255 : v;
  return normalise ? (T) ((float) v * (1.0f / 255.0f)) : (T) v;
}
"""


class _Fused:
    """The fused kernel, made on first use in a process and checked against the portable form on the first stack of
    each layout and dtype it converts (module doc); `broken` says why it was set aside (None: it runs)."""

    def __init__(self) -> None:
        self.kernel: Any = None
        self.checked: set[tuple[str, Any]] = set()  # (layout, dtype) whose pictures were found equal
        self.broken: str | None = None
        self.lock = threading.Lock()

    def why_not(self, device: Any, height: int, width: int) -> str | None:
        """Why the kernel cannot convert pictures of `height` x `width` on `device` here (None: it can)."""
        import torch

        if self.broken:
            return self.broken
        if device.type != "cuda" or not torch.cuda.is_available():
            return "not on a CUDA device"
        return f"an odd size ({height}x{width}): it takes whole 2x2 blocks" if height % 2 or width % 2 else None

    def usable(self, nv12: Any, height: int, width: int, insist: bool | None) -> bool:
        reason = self.why_not(nv12.device, height, width)
        if reason and insist:
            raise RuntimeError(f"the fused NV12 conversion cannot run: {reason}")
        return reason is None

    def convert(self, nv12: Any, height: int, width: int, colour: Colour, layout: Layout, dtype: Any,
                insist: bool | None = None) -> Any:
        """The pictures through the kernel; checked on the first stack of their layout and dtype. Out of memory is
        raised as it is; a kernel that does not build, launch or agree is set aside (`insist`: raised instead)."""
        import torch

        try:
            out = self._launch(nv12, height, width, colour, layout, dtype)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - said, then the portable form converts
            return self._set_aside(exc, insist, nv12, height, width, colour, layout, dtype)
        if (layout, dtype) not in self.checked and out.numel():
            want = nv12_to_rgb(nv12, height, width, colour, layout, dtype, fused=False)
            if not torch.equal(out, want):
                return self._set_aside(ValueError(f"its {layout} {dtype} pictures differ from the portable form's"),
                                       insist, nv12, height, width, colour, layout, dtype)
            with self.lock:
                self.checked.add((layout, dtype))
        return out

    def _set_aside(self, exc: Exception, insist: bool | None, nv12: Any, height: int, width: int, colour: Colour,
                   layout: Layout, dtype: Any) -> Any:
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if insist:
            raise RuntimeError(f"the fused NV12 conversion failed: {why}") from exc
        self.broken = why
        warnings.warn(f"the fused NV12 to RGB kernel is set aside ({why}); pictures are converted by the portable "
                      "form (dali_stream/decode/nv12.py), which holds a few bands of temporaries", RuntimeWarning,
                      stacklevel=4)
        return nv12_to_rgb(nv12, height, width, colour, layout, dtype, fused=False)

    def _launch(self, nv12: Any, height: int, width: int, colour: Colour, layout: Layout, dtype: Any) -> Any:
        import torch

        with self.lock:
            if self.kernel is None:
                from torch.cuda.jiterator import _create_jit_fn

                self.kernel = _create_jit_fn(_KERNEL, scale=0, offset=0, r_cr=0, g_cb=0, g_cr=0, b_cb=0, shift=SHIFT,
                                             normalise=0)
        n, rows = len(nv12), nv12.shape[-2] * 2 // 3
        hh, hw = height // 2, width // 2
        y = nv12[:, :height, :width].unflatten(1, (hh, 2)).unflatten(3, (hw, 2))  # (n, hh, 2, hw, 2)
        chroma = nv12[:, rows:rows + hh, :width].unflatten(2, (hw, 2))  # (n, hh, hw, 2)
        cb, cr = (chroma[..., c][:, :, None, :, None] for c in (0, 1))  # (n, hh, 1, hw, 1)
        channel = torch.arange(3, dtype=dtype, device=nv12.device)
        if layout == "hwc":  # (n, hh, 2, hw, 2, 3)
            inputs = (y[..., None], cb[..., None], cr[..., None], channel)
        else:  # (n, 3, hh, 2, hw, 2)
            inputs = (y[:, None], cb[:, None], cr[:, None], channel.view(1, 3, 1, 1, 1, 1))
        scale, offset, r_cr, g_cb, g_cr, b_cb = fixed_point(colour)
        out = self.kernel(*inputs, scale=scale, offset=offset, r_cr=r_cr, g_cb=g_cb, g_cr=g_cr, b_cb=b_cb,
                          shift=SHIFT, normalise=int(dtype != torch.uint8))
        return out.reshape((n, height, width, 3) if layout == "hwc" else (n, 3, height, width))


_FUSED = _Fused()


def fused_runs(device: Any, height: int, width: int) -> bool:
    """Whether the fused kernel converts pictures of `height` x `width` on `device` (a torch.device) in this process
    (the first stack of each layout and dtype may still set it aside)."""
    return _FUSED.why_not(device, height, width) is None


def fused_state() -> str:
    """What the fused kernel is in this process, for reports: 'unused', 'checked', or why it was set aside."""
    if _FUSED.broken:
        return f"set aside: {_FUSED.broken}"
    return f"checked ({len(_FUSED.checked)} layouts and dtypes)" if _FUSED.checked else "unused"


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
