"""GPU route (NVDEC through DALI's mixed decoder): runs where DALI sees a CUDA GPU, skips elsewhere."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dali_stream import DeviceError, StreamLoader
from dali_stream.paint import read_ids

pytestmark = pytest.mark.gpu

FPS = 30
NVDEC_CAMERAS = ["observation.images.front", "observation.images.side", "observation.images.top"]  # h264 hevc vp9
DELTAS = {"observation.images.front": [-1 / FPS, 0.0, 2 / FPS], "observation.images.top": [-2 / FPS, 0.0],
          "action": [0.0, 1 / FPS]}


def test_auto_routes_h264_hevc_vp9_to_nvdec_and_av1_to_cpu(four_codec_dataset):
    loader = StreamLoader(str(four_codec_dataset), batch_size=4, device="cuda")
    assert [loader.routes[k] for k in NVDEC_CAMERAS] == ["nvdec"] * 3
    assert loader.routes["observation.images.wrist"] in ("nvdec", "torchcodec")  # AV1: NVDEC only on L4/L40S-class


def test_av1_on_gpu_is_refused_where_nvdec_cannot(four_codec_dataset):
    with pytest.raises(DeviceError, match=r"'av1' is not decodable by NVDEC"):
        StreamLoader(str(four_codec_dataset), decode={"observation.images.wrist": "gpu"})


def test_nvdec_frames_carry_the_planned_ids_and_land_on_cuda(four_codec_dataset):
    decode = {k: "gpu" for k in NVDEC_CAMERAS}
    loader = StreamLoader(str(four_codec_dataset), batch_size=4, episode_pool_size=3, delta_timestamps=DELTAS,
                          decode=decode, device="cuda", drop_last=False, image_dtype="uint8")
    lengths = dict(zip(loader.meta.episodes["episode_index"].tolist(), loader.meta.lengths.tolist()))
    seen = 0
    for batch in loader:
        assert all(batch[k].is_cuda for k in NVDEC_CAMERAS)
        eps, frames = batch["episode_index"].cpu().numpy(), batch["frame_index"].cpu().numpy()
        for key, steps in (("observation.images.front", (-1, 0, 2)), ("observation.images.top", (-2, 0)),
                           ("observation.images.side", (0,))):
            imgs = batch[key].cpu().numpy()
            for i, (ep, fr) in enumerate(zip(eps, frames)):
                want = [(int(ep), min(max(int(fr) + d, 0), lengths[int(ep)] - 1)) for d in steps]
                got = [read_ids(f) for f in (imgs[i] if imgs[i].ndim == 4 else imgs[i][None])]
                assert got == want, (key, ep, fr)
        seen += len(eps)
    assert seen == loader.meta.total_frames


def test_nvdec_and_cpu_routes_give_the_same_frames(four_codec_dataset):
    """Same plan through NVDEC and torchcodec: same painted ids, pixels within YUV->RGB rounding."""
    args = dict(batch_size=4, episode_pool_size=3, seed=5, delta_timestamps=DELTAS, device="cuda",
                image_dtype="uint8")
    gpu = StreamLoader(str(four_codec_dataset), decode={k: "gpu" for k in NVDEC_CAMERAS}, **args)
    cpu = StreamLoader(str(four_codec_dataset), decode="cpu", **args)
    for a, b in zip(gpu, cpu):
        assert torch.equal(a["index"].cpu(), b["index"].cpu())
        for key in NVDEC_CAMERAS:
            x, y = a[key].cpu().numpy().astype(np.int16), b[key].cpu().numpy().astype(np.int16)
            assert np.abs(x - y).mean() < 4, key


def test_resume_on_gpu(four_codec_dataset):
    args = dict(batch_size=3, episode_pool_size=2, seed=9, delta_timestamps=DELTAS, device="cuda")
    full = [b["index"].tolist() for b in StreamLoader(str(four_codec_dataset), **args)]
    first = StreamLoader(str(four_codec_dataset), **args)
    for i, _ in enumerate(first):
        if i == 3:
            break
    second = StreamLoader(str(four_codec_dataset), **args)
    second.load_state_dict(first.state_dict())
    assert [b["index"].tolist() for b in second] == full[4:]
