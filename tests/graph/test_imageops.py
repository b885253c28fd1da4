"""Resize, centre crop and normalisation inside the DALI graph, on both CPU routes (torchcodec and DALI's)."""

from __future__ import annotations

import numpy as np
import pytest

from dali_stream import ConfigError, StreamLoader
from dali_stream.tools.paint import read_ids

CAMS = ("observation.images.front", "observation.images.top")  # h264 via torchcodec, vp9 via DALI's CPU decoder
BASE = dict(batch_size=4, episode_pool_size=2, seed=4, device="cpu", num_workers=1, decode="dali-cpu",
            delta_timestamps={"observation.images.top": [-1 / 30, 0.0]})


def _first(loader):
    return next(iter(loader))


def test_resize_keeps_the_painted_frame(small_dataset):
    batch = _first(StreamLoader(str(small_dataset), resize=(48, 64), image_dtype="uint8", **BASE))
    assert batch[CAMS[0]].shape == (4, 3, 48, 64) and batch[CAMS[1]].shape == (4, 2, 3, 48, 64)
    for i, (ep, fr) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
        assert read_ids(batch[CAMS[0]][i]) == (ep, fr)
        assert read_ids(batch[CAMS[1]][i, 1]) == (ep, fr)


def test_centre_crop_after_resize(small_dataset):
    full = _first(StreamLoader(str(small_dataset), resize=(48, 64), **BASE))
    cropped = _first(StreamLoader(str(small_dataset), resize=(48, 64), crop=(40, 56), **BASE))
    for key in CAMS:
        assert cropped[key].shape[-2:] == (40, 56)
        np.testing.assert_allclose(cropped[key].numpy(), full[key].numpy()[..., 4:44, 4:60], atol=1e-6)


def test_mean_std_normalisation(small_dataset):
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    plain = _first(StreamLoader(str(small_dataset), **BASE))
    normed = _first(StreamLoader(str(small_dataset), mean=mean, std=std, **BASE))
    for key in CAMS:
        x = plain[key].numpy()
        shape = (1,) * (x.ndim - 3) + (3, 1, 1)
        want = (x - np.reshape(mean, shape)) / np.reshape(std, shape)
        np.testing.assert_allclose(normed[key].numpy(), want, atol=1e-5)
        assert normed[key].dtype.is_floating_point


@pytest.mark.parametrize("kwargs,message", [
    (dict(crop=(200, 50)), r"`crop` \(200, 50\) is larger than camera 'observation.images.front'.*\(96, 128\)"),
    (dict(resize=(32, 32), crop=(40, 40)), r"larger than camera .* resized image \(32, 32\)"),
    (dict(resize=(0, 10)), r"`resize` must be positive \(height, width\). Found: \(0, 10\)"),
    (dict(resize=64), r"`resize` must be \(height, width\) in pixels. Found: 64"),
    (dict(mean=0.5), r"`mean` and `std` go together"),
    (dict(mean=0.5, std=(0.2, 0.0, 0.1)), r"`std` must be > 0"),
    (dict(mean=(0.1, 0.2), std=0.3), r"one per RGB channel \(3\)"),
    (dict(mean=0.5, std=0.2, image_dtype="uint8"), r"use image_dtype='float32'"),
    (dict(image_dtype="float16"), r"`image_dtype` must be 'float32' or 'uint8' \(or torch.float32 / torch.uint8\). Found: 'float16'"),
])
def test_bad_image_options(small_dataset, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        StreamLoader(str(small_dataset), **kwargs)
