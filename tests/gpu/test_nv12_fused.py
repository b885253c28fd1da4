"""The fused NV12 to RGB kernel (`decode.nv12`, torch's jiterator) on a CUDA GPU: the portable form's pictures bit
for bit in every layout and dtype, one output's memory and nothing beside it. Skips without a GPU (the portable
form: tests/decode/test_nv12.py)."""

from __future__ import annotations

import warnings

import pytest
import torch

from dali_stream.decode import nv12 as nv12_module
from dali_stream.decode.colour import Colour
from dali_stream.decode.nv12 import nv12_to_rgb
from tests.decode.test_nv12 import _pictures as random_nv12

pytestmark = pytest.mark.gpu


def _pictures(n: int, height: int, width: int) -> torch.Tensor:
    return random_nv12(n, height, width).cuda()


@pytest.mark.parametrize("colour", [Colour(), Colour(1, False), Colour(2, True)], ids=str)
@pytest.mark.parametrize("layout", ["hwc", "chw"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=str)
def test_the_fused_kernel_gives_the_portable_pictures(colour, layout, dtype):
    nv12 = _pictures(5, 480, 640)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a kernel set aside warns: here that is a failure
        fused = nv12_to_rgb(nv12, 480, 640, colour, layout, dtype, fused=True)
    portable = nv12_to_rgb(nv12, 480, 640, colour, layout, dtype, fused=False)
    assert fused.is_cuda and fused.dtype == dtype and fused.shape == portable.shape
    assert torch.equal(fused, portable)
    assert nv12_module.fused_state().startswith("checked")


def test_a_coded_size_is_cut_and_an_odd_size_goes_portable():
    nv12 = _pictures(2, 544, 960)  # 540 rows coded as 544
    assert torch.equal(nv12_to_rgb(nv12, 540, 960, Colour(), fused=True),
                       nv12_to_rgb(nv12, 540, 960, Colour(), fused=False))
    odd = nv12_to_rgb(nv12, 539, 959, Colour())  # the kernel takes whole 2x2 blocks: the portable form converts
    assert torch.equal(odd, nv12_to_rgb(nv12, 540, 960, Colour(), fused=False)[:, :539, :959])


def test_the_fused_kernel_holds_nothing_beside_its_output():
    """The peak CUDA memory of converting 64 480p pictures: the output alone (and the first stack's check, done)."""
    nv12 = _pictures(64, 480, 640)
    nv12_to_rgb(nv12[:2], 480, 640, Colour(), fused=True)  # compiled and checked
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = nv12_to_rgb(nv12, 480, 640, Colour(), fused=True)
    torch.cuda.synchronize()
    beside = torch.cuda.max_memory_allocated() - base - out.numel()
    assert beside <= 1 << 20, beside
