"""`memory_format="channels_last"`: camera tensors keep lerobot's shapes and values, stored HWC (the CPU route then
skips the CHW transpose). Host frames (h264 through torchcodec) and DALI's graph (vp9, and the h264 camera too
once a crop sends it through the graph) both checked against the contiguous default."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dali_stream import LoaderConfig, StreamLoader
from dali_stream.errors import ConfigError
from dali_stream.tools.paint import read_ids
from tests.support.take import take

FRONT, TOP = "observation.images.front", "observation.images.top"  # h264 via torchcodec, vp9 via DALI's CPU decoder
BASE = dict(batch_size=4, episode_pool_size=2, seed=6, device="cpu", num_workers=2, episode_frames_bytes=0,
            decode="dali-cpu",
            delta_timestamps={FRONT: [-2 / 30, 0.0, 2 / 30], "action": [0.0, 1 / 30]})


def _batches(loader, n):
    with loader:
        return take(loader, n)


def _hwc_storage(t: torch.Tensor) -> bool:
    """(..., 3, H, W) whose memory is (..., H, W, 3) contiguous."""
    return t.movedim(-3, -1).is_contiguous()


@pytest.mark.parametrize("options", [dict(image_dtype="uint8"), dict(image_dtype="float32"),
                                     dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
                                     dict(image_dtype="uint8", crop=(96, 128))])
def test_channels_last_has_the_contiguous_values_in_hwc_memory(small_dataset, options):
    last = StreamLoader(str(small_dataset), memory_format="channels_last", **BASE, **options)
    assert last.memory_budget()["host_frames"] == ([] if "crop" in options else [FRONT])
    default = StreamLoader(str(small_dataset), **BASE, **options)
    for a, b in zip(_batches(last, 3), _batches(default, 3)):
        assert list(a) == list(b)
        for key in (FRONT, TOP):
            assert a[key].shape == b[key].shape and a[key].dtype == b[key].dtype
            assert b[key].is_contiguous() and _hwc_storage(a[key]) and not a[key].is_contiguous()
            if a[key].dtype == torch.uint8:
                assert torch.equal(a[key], b[key])
            else:
                np.testing.assert_allclose(a[key].numpy(), b[key].numpy(), atol=2e-6)
        # a single-step camera is a 4-D batch: torch's own channels_last format
        assert a[TOP].ndim == 4 and a[TOP].is_contiguous(memory_format=torch.channels_last)
        # merging batch and steps (a policy flattening its frames) still needs no copy
        assert a[FRONT].flatten(0, 1).is_contiguous(memory_format=torch.channels_last)


def test_channels_last_frames_are_the_planned_ones(small_dataset):
    for batch in _batches(StreamLoader(str(small_dataset), image_dtype="uint8", memory_format="channels_last",
                                       **BASE), 3):
        for i, (ep, fr) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
            assert read_ids(batch[TOP][i]) == (ep, fr)
            for t, delta in enumerate((-2, 0, 2)):
                if not batch[f"{FRONT}_is_pad"][i, t]:
                    assert read_ids(batch[FRONT][i, t]) == (ep, fr + delta)


def test_memory_format_is_checked_and_takes_torchs_names():
    assert LoaderConfig(memory_format=torch.channels_last).memory_format == "channels_last"
    assert LoaderConfig(memory_format=torch.contiguous_format).memory_format == "contiguous"
    with pytest.raises(ConfigError, match=r"`memory_format` must be 'contiguous' or 'channels_last'.*'nhwc'"):
        LoaderConfig(memory_format="nhwc")
    with pytest.raises(ConfigError, match="torch.preserve_format"):
        LoaderConfig(memory_format=torch.preserve_format)
