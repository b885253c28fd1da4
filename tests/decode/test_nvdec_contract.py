"""What the nvdec-open engine hands PyNvVideoCodec, checked on the CPU: PyNvVideoCodec is replaced at its Python
boundary by a stand-in that records every call and decodes the packets with FFmpeg's decoders, handing back NV12
as NVDEC does (tests/support/fake_nvc.py); torch's CUDA stream calls become no-ops. The packet feed's contract: each
packet's bytes and PTS in feed order, an end of stream after every clip, the decoder's arguments (codec, NV12 out,
the camera's size rounded up to 128-pixel blocks, the decoder's own stream, the primary context), one decoder per
decode thread and camera, and the frames: FFmpeg's colours (`decode.colour`) and the planned painted ids."""

from __future__ import annotations

import contextlib
import sys
import time

import pytest
import torch

from dali_stream import DatasetError, StreamLoader
from dali_stream.decode import packet_decoders
from dali_stream.decode.feed import build_feed
from dali_stream.decode.route import CPU_OPEN, NVDEC_OPEN, route_named
from dali_stream.tools.paint import read_ids
from tests.decode.test_open_engine import episode_segments
from tests.support import fake_nvc

CAMERAS = {"front": "h264", "side": "hevc", "wrist": "av1", "top": "vp9"}


class FakeStream:
    cuda_stream = 0x5EED

    def __init__(self, device=None) -> None:
        self.device = device

    def synchronize(self) -> None:
        pass


@pytest.fixture
def nvdec(monkeypatch):
    """The nvdec-open engine's pieces on the CPU, PyNvVideoCodec replaced by the recording stand-in."""
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", fake_nvc)
    monkeypatch.setattr(fake_nvc, "decoders", [])
    monkeypatch.setattr(packet_decoders, "primary_context", lambda index: 0xC0)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    return fake_nvc


def _parts(loader, key, every=5):
    """Samples of windows spread over every episode: (segment, frame indices) each."""
    parts = []
    for _, seg, idx in episode_segments(loader, key):
        for f in range(0, len(idx), every):
            parts.append((seg, idx[[max(0, f - 1), f, min(len(idx) - 1, f + 2)]]))
    return parts


@pytest.mark.parametrize("camera,each", [(c, False) for c in CAMERAS] + [("front", True), ("wrist", True)])
def test_the_packet_feed_reaches_the_decoder_as_built(four_codec_dataset, nvdec, camera, each, monkeypatch):
    """`each`: every picture converted as it leaves its surface, as where the fused conversion runs (CUDA), else
    the pictures copied out and converted as a stack once the feed is decoded."""
    monkeypatch.setattr(packet_decoders, "fused_runs", lambda device, height, width: each)
    key = f"observation.images.{camera}"
    with StreamLoader(str(four_codec_dataset), batch_size=2, decode="cpu-open", device="cpu", num_workers=0) as loader:
        size = (loader.meta.cameras[key].height, loader.meta.cameras[key].width)
        parts = _parts(loader, key)
        segs, idx = [p[0] for p in parts], [p[1] for p in parts]
        engine = NVDEC_OPEN.make_engine(1, 0, {key: size})
        reference = CPU_OPEN.make_engine(1, None, {key: size})
        try:
            got, _ = engine.decode(key, segs, idx)
            want, _ = reference.decode(key, segs, idx)
        finally:
            engine.close()
            reference.close()
    (dec,) = nvdec.decoders
    assert dec.kwargs["codec"] == packet_decoders.NVDEC_CODECS[CAMERAS[camera]]
    assert dec.kwargs["outputColorType"] == "NATIVE" and dec.kwargs["usedevicememory"] is True
    assert dec.kwargs["cudastream"] == FakeStream.cuda_stream and dec.kwargs["cudacontext"] == 0xC0
    assert dec.kwargs["gpuid"] == 0
    assert (dec.kwargs["maxheight"], dec.kwargs["maxwidth"]) == tuple(-(-n // 128) * 128 for n in size)
    feed = build_feed(parts)
    expected = []
    for first, end in feed.clip_ranges():
        expected += [("packet", feed.units[i], int(feed.pts[i])) for i in range(first, end)] + [("eos",)]
    assert dec.calls == expected  # every packet's bytes and time, in order; an end of stream after each clip
    assert got.shape == want.shape == (3 * len(parts), *size, 3) and got.dtype == torch.uint8
    assert int((got.int() - torch.as_tensor(want).int()).abs().max()) <= 2  # FFmpeg's colours, within 2 levels
    assert [read_ids(f) for f in got.numpy()] == [read_ids(f) for f in want]


def test_one_decoder_per_decode_thread_and_camera(four_codec_dataset, nvdec, monkeypatch):
    """Decoders stay open: one per (decode thread, camera); a file's colour is read once for the whole engine."""
    probed: list[str] = []
    probe = packet_decoders.probe_colour

    def counted(codec, units, pts):
        probed.append(codec)
        time.sleep(0.05)  # a slow probe: both decode threads meet a new file while it runs
        return probe(codec, units, pts)

    monkeypatch.setattr(packet_decoders, "probe_colour", counted)
    keys = ["observation.images.front", "observation.images.top"]
    files = set()
    with StreamLoader(str(four_codec_dataset), batch_size=2, decode="cpu-open", device="cpu", num_workers=0) as loader:
        sizes = {k: (loader.meta.cameras[k].height, loader.meta.cameras[k].width) for k in keys}
        engine = NVDEC_OPEN.make_engine(2, 0, sizes)
        try:
            for _ in range(3):
                for key in keys:
                    parts = _parts(loader, key, every=7)
                    parts += parts  # each thread's half the same files: both threads meet each new file at once
                    files |= {p[0].source for p in parts}
                    engine.decode(key, [p[0] for p in parts], [p[1] for p in parts])
            stats = engine.stats()
        finally:
            engine.close()
    made = [(d.thread, d.kwargs["codec"]) for d in nvdec.decoders]
    assert len(made) == len(set(made)) == stats["decoders_opened"] <= 2 * len(keys)
    assert stats["feeds"] == 3 * 2 * len(keys)
    assert len(probed) == len(files) > len(keys)  # several files per camera, each probed once over 2 threads


@pytest.mark.parametrize("route", ["nvdec-open", "cpu-open"])
def test_a_segment_of_another_size_is_refused_not_rescaled(four_codec_dataset, nvdec, route):
    """meta/info.json's size differs from the file's: DatasetError naming the file and both sizes, before any
    decoder sees a packet (an NVDEC decoder would scale the pictures to its first size)."""
    key = "observation.images.front"
    with StreamLoader(str(four_codec_dataset), batch_size=2, decode="cpu-open", device="cpu", num_workers=0) as loader:
        h, w = loader.meta.cameras[key].height, loader.meta.cameras[key].width
        parts = _parts(loader, key)[:2]
        engine = route_named(route).make_engine(1, 0, {key: (h + 16, w)})
        try:
            with pytest.raises(DatasetError) as info:
                engine.decode(key, [p[0] for p in parts], [p[1] for p in parts])
        finally:
            engine.close()
    message = str(info.value)
    assert f"is {w}x{h} (width x height)" in message and f"gives the camera {w}x{h + 16}" in message
    assert parts[0][0].source in message and key in message
    assert not nvdec.decoders or not nvdec.decoders[0].calls
