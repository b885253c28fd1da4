"""NVDEC's NV12 to RGB (`decode.nv12`): its integer arithmetic within 1 level of the float conversion it replaced,
in every layout and dtype, at any size and stack length, with temporaries bounded by its bands; the fused kernel set
aside with a warning where it cannot run. FFmpeg's colours: tests/decode/test_colour.py; the fused kernel on a GPU:
tests/gpu/test_nv12_fused.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from dali_stream.decode import nv12 as nv12_module
from dali_stream.decode.colour import Colour
from dali_stream.decode.nv12 import BAND_BYTES, fixed_point, nv12_to_rgb
from tests.support.float_nv12 import nv12_to_rgb as float_nv12_to_rgb

COLOURS = [Colour(), Colour(1, False), Colour(2, True), Colour(9, True), Colour(4, False)]


def _pictures(n: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """`n` NV12 pictures of random values, the rows and pitch NVDEC would hand out for `height` x `width`."""
    rows = height + (height + 1) // 2
    pitch = max(width, 2 * ((width + 1) // 2))
    return torch.randint(0, 256, (n, rows, pitch), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("colour", COLOURS, ids=str)
@pytest.mark.parametrize("size", [(480, 640), (481, 641), (7, 9), (2, 2)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_within_one_level_of_the_float_conversion(colour, size):
    """Every matrix and range, even and odd sizes: at most 1 level from the float conversion, and rarely that."""
    nv12 = _pictures(3, *size)
    got, want = nv12_to_rgb(nv12, *size, colour), float_nv12_to_rgb(nv12, *size, colour)
    assert got.shape == want.shape == (3, *size, 3) and got.dtype == torch.uint8
    apart = (got.int() - want.int()).abs()
    assert int(apart.max()) <= 1
    assert float((apart > 0).float().mean()) < 0.01


def test_each_layout_and_dtype_is_the_same_pictures():
    """CHW is HWC's channels first; float32 is lerobot's `frames.float() / 255` of the uint8 pictures, bit for bit;
    any leading shape converts as the flat stack."""
    nv12 = _pictures(4, 48, 64)
    hwc = nv12_to_rgb(nv12, 48, 64, Colour())
    assert torch.equal(nv12_to_rgb(nv12, 48, 64, Colour(), layout="chw"), hwc.permute(0, 3, 1, 2))
    assert torch.equal(nv12_to_rgb(nv12, 48, 64, Colour(), dtype=torch.float32), hwc.float() / 255)
    chw_float = nv12_to_rgb(nv12, 48, 64, Colour(), layout="chw", dtype=torch.float32)
    assert torch.equal(chw_float, hwc.permute(0, 3, 1, 2).float() / 255)
    assert torch.equal(nv12_to_rgb(nv12.reshape(2, 2, *nv12.shape[1:]), 48, 64, Colour()), hwc.reshape(2, 2, 48, 64, 3))
    assert torch.equal(nv12_to_rgb(nv12[0], 48, 64, Colour()), hwc[0])


def test_a_smaller_size_cuts_the_coded_picture():
    """A coded size rounded up to whole blocks (1088 rows for 1080): the camera's rows and columns are kept."""
    nv12 = _pictures(2, 64, 64)
    assert torch.equal(nv12_to_rgb(nv12, 60, 62, Colour()), nv12_to_rgb(nv12, 64, 64, Colour())[:, :60, :62])


def test_bands_of_rows_give_the_whole_pictures(monkeypatch):
    """A picture larger than a band (1080p at the default) is converted rows at a time: the same values as whole."""
    nv12 = _pictures(2, 50, 70)
    whole = nv12_to_rgb(nv12, 50, 70, Colour(1, False), layout="chw")
    monkeypatch.setattr(nv12_module, "BAND_BYTES", 4 * 4 * 35 * 3)  # 3 pairs of rows a band
    assert torch.equal(nv12_to_rgb(nv12, 50, 70, Colour(1, False), layout="chw"), whole)
    assert torch.equal(nv12_to_rgb(nv12, 50, 70, Colour(1, False), dtype=torch.float32), whole.permute(0, 2, 3, 1) / 255)


def test_wrong_arguments_are_named():
    nv12 = _pictures(1, 8, 8)
    with pytest.raises(ValueError, match="layout='nhwc'"):
        nv12_to_rgb(nv12, 8, 8, Colour(), layout="nhwc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="torch.float16"):
        nv12_to_rgb(nv12, 8, 8, Colour(), dtype=torch.float16)
    with pytest.raises(ValueError, match="cannot give 16x8"):
        nv12_to_rgb(nv12, 16, 8, Colour())
    with pytest.raises(RuntimeError, match="not on a CUDA device"):
        nv12_to_rgb(nv12, 8, 8, Colour(), fused=True)


def test_the_fixed_point_coefficients_are_swscales():
    """Each integer within half a unit of the real coefficient (`SHIFT` fraction bits)."""
    one = 1 << nv12_module.SHIFT
    scale, offset, r_cr, g_cb, g_cr, b_cb = fixed_point(Colour())
    assert (scale, offset) == (round(255 / 219 * one), 16)
    assert abs(r_cr / one - 2 * (1 - 0.299) * 255 / 224) <= 0.5 / one
    assert abs(b_cb / one - 2 * (1 - 0.114) * 255 / 224) <= 0.5 / one
    assert g_cb < 0 and g_cr < 0
    assert fixed_point(Colour(2, True))[:2] == (one, 0)


def test_a_kernel_that_cannot_run_is_set_aside_with_a_warning():
    """The fused kernel's failure (here: jiterator on the CPU) is said once, and the portable form's pictures come
    back; later stacks go to the portable form without trying again."""
    fused = nv12_module._Fused()
    nv12 = _pictures(2, 8, 8)
    with pytest.warns(RuntimeWarning, match="fused NV12 to RGB kernel is set aside"):
        got = fused.convert(nv12, 8, 8, Colour(), "hwc", torch.uint8)
    assert torch.equal(got, nv12_to_rgb(nv12, 8, 8, Colour(), fused=False))
    assert fused.broken and not fused.usable(nv12, 8, 8, None)
    with pytest.raises(RuntimeError, match="cannot run: .*" + fused.broken.split(":")[0]):
        fused.usable(nv12, 8, 8, True)
    with pytest.raises(RuntimeError, match="fused NV12 conversion failed"):  # insisting: raised, not set aside
        nv12_module._Fused().convert(nv12, 8, 8, Colour(), "hwc", torch.uint8, insist=True)


_PEAK = """
import resource, sys, torch
from dali_stream.decode.colour import Colour
from dali_stream.decode.nv12 import nv12_to_rgb
n, height, width, layout = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
nv12 = torch.randint(0, 256, (n, height * 3 // 2, width), dtype=torch.uint8)
out = nv12_to_rgb(nv12[:1], 16, 16, Colour())  # torch's own first-use allocations, before the measure
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = nv12_to_rgb(nv12, height, width, Colour(), layout=layout)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.parametrize("n,height,width,layout", [(64, 480, 640, "hwc"), (256, 240, 320, "chw"),
                                                    (4, 1080, 1920, "hwc")])
def test_the_temporaries_are_a_few_bands_whatever_the_stack(n, height, width, layout):
    """The peak memory of a conversion in a fresh process: the RGB output and a few bands of 32-bit values
    (`BAND_BYTES`: 2 to 2.7 of them measured), for 64 pictures at 480p, 256 at 240p, and for 1080p pictures (converted rows at a time). The float
    conversion it replaced held about three float planes of a 16-picture slice (59 MB at 480p) beside the output."""
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(n), str(height), str(width), layout], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rgb = n * height * width * 3
    beside = int(proc.stdout.split()[-1]) - rgb
    assert beside < 4 * BAND_BYTES, (beside / BAND_BYTES, "bands beside the output")
