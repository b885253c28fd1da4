"""The open-decoder engine (decode/engine.py) on the CPU: what its decoders are fed (decode/feed.py), that
they stay open, that a picture a decoder drops is a named error, and its frames in the DALI graph beside the other
routes. Every painted frame through it (boundary matrix, wild encodings, alone, in windows, at episode edges, read
whole and in pieces) is checked by tests/loader/test_boundaries.py and tests/decode/test_wild_encodings.py (decode="cpu-open");
tests/gpu/test_gpu.py runs the same through NVDEC (nvdec_engine="open")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dali_stream import DecodeError, StreamLoader
from dali_stream.decode.engine import OpenDecoders
from dali_stream.decode.feed import START_CODE, av1_has_sequence_header, bitstream_unit, build_feed, decoder_config
from dali_stream.decode.packet_decoders import AvPacketDecoder
from dali_stream.decode.route import CPU_OPEN, NVDEC, TORCHCODEC
from dali_stream.decode.routes import RouteChoice, nvdec_engine, open_routes
from dali_stream.fetch.tables import FRAME_TIME_S
from dali_stream.tools.paint import read_ids
from tests.decode.test_wild_encodings import wild_dataset
from tests.loader.test_boundaries import check_every_frame
from tests.support.parts import store_for

CAMERAS = {"front": "h264", "side": "hevc", "wrist": "av1", "top": "vp9"}


@pytest.fixture(scope="module")
def wild(tmp_path_factory):
    """Each encoder's defaults at GOP 60 (x264 B-frames, x265 CRA keyframes with RASL pictures, two-pass VP9,
    SVT-AV1): episodes start deep inside GOPs."""
    return wild_dataset(tmp_path_factory.mktemp("open") / "wild", CAMERAS, 96, 128)


def episode_segments(loader, key):
    """(episode, segment, frame indices of every frame of the episode) per episode, from a store as the loader's."""
    meta = loader.meta
    store = store_for(loader)
    try:
        for pos in range(len(meta.lengths)):
            ep = int(meta.episodes["episode_index"][pos])
            query = float(meta.cameras[key].from_timestamp[ep]) + store.rows(pos)[FRAME_TIME_S].astype(np.float64)
            seg = store.segment_for(pos, key, query)
            yield ep, seg, seg.frame_indices(query, loader.config.tolerance_s, "test")
    finally:
        store.close()


def nal_types(codec: str, unit: bytes) -> list[int]:
    units = [u for u in unit.split(START_CODE) if u]
    return [u[0] & 0x1F if codec == "h264" else (u[0] >> 1) & 0x3F for u in units]


@pytest.mark.parametrize("camera", ["front", "side"])
def test_h264_and_hevc_are_fed_annexb_with_parameter_sets_at_every_keyframe(wild, camera):
    """Start codes, never length prefixes; SPS/PPS (HEVC: VPS/SPS/PPS) before every clip's keyframe, so a decoder may
    start at any clip without extradata; an HEVC clip never starts on a CRA (spliced to BLA_W_LP: a new sequence)."""
    root, _ = wild
    key = f"observation.images.{camera}"
    codec = CAMERAS[camera]
    params = [7, 8] if codec == "h264" else [32, 33, 34]
    spliced = 0
    with StreamLoader(str(root), batch_size=2, decode="cpu-open", device="cpu", num_workers=0) as loader:
        for ep, seg, idx in episode_segments(loader, key):
            spread = [(seg, idx[[f]]) for f in range(0, len(idx), 7)]
            for feed in (build_feed(spread), build_feed([(seg, idx[[-1]])])):  # the last frame: its own GOP's key
                assert all(u.startswith(START_CODE) for u in feed.units)
                for start in feed.starts.tolist():
                    types = nal_types(codec, feed.units[start])
                    assert types[:len(params)] == params, (ep, types)
                    if codec == "hevc":
                        assert 21 not in types, (ep, types)  # CRA_NUT
                        spliced += 16 in types  # BLA_W_LP
    if codec == "hevc":
        assert spliced, "no clip started on an x265 CRA keyframe: the fixture lost what makes it hard"


def test_feed_times_never_overlap_and_name_every_asked_frame(wild):
    """Clips follow one another in feed time; each step's feed time is the pts of the frame it asked for, moved by
    its clip's shift; parts of one segment share its clips."""
    root, _ = wild
    key = "observation.images.front"
    with StreamLoader(str(root), batch_size=2, decode="cpu-open", device="cpu", num_workers=0) as loader:
        segs = list(episode_segments(loader, key))
    parts = [(seg, idx[[0, 0, 1]]) for _, seg, idx in segs] + [(seg, idx[[-2, -1]]) for _, seg, idx in segs]
    feed = build_feed(parts)
    bounds = np.append(feed.starts, len(feed.units))
    spans = [(feed.pts[a:b].min(), feed.pts[a:b].max()) for a, b in zip(bounds[:-1], bounds[1:])]
    assert all(hi < lo for (_, hi), (lo, _) in zip(spans[:-1], spans[1:]))
    assert set(feed.wanted.tolist()) <= set(feed.pts.tolist())
    assert feed.asked[0][0] == feed.asked[0][1]  # a repeated frame is one picture
    assert feed.clips <= 2 * len(segs)


def test_an_av1_keyframe_without_a_sequence_header_gets_the_av1c_one(wild):
    root, _ = wild
    key = "observation.images.wrist"
    with StreamLoader(str(root), batch_size=2, decode="cpu-open", device="cpu", num_workers=0) as loader:
        _, seg, idx = next(episode_segments(loader, key))
    index = seg.packets()
    config = decoder_config(seg, index)
    first = int(np.flatnonzero(index.key)[0])
    sample = seg.data[int(index.pos[first]):int(index.pos[first] + index.size[first])]
    assert av1_has_sequence_header(config[4:])
    stripped = strip_obus(sample, 1)  # OBU_SEQUENCE_HEADER
    assert not av1_has_sequence_header(stripped)
    fed = bitstream_unit("av1", stripped, config, key=True, first=True)
    assert fed == config[4:] + stripped and av1_has_sequence_header(fed)
    assert bitstream_unit("av1", sample, config, key=True, first=True) == sample  # has one: as stored


def strip_obus(sample: bytes, obu_type: int) -> bytes:
    from dali_stream.fetch.pictures import av1_obus

    return b"".join(sample[start:end] for kind, start, _, end in av1_obus(sample) if kind != obu_type)


def test_decoders_stay_open_for_the_loaders_life(wild):
    """One decoder per (decode thread, camera), whatever the batches: an epoch with two threads opens at most two
    per camera and feeds them every batch."""
    root, _ = wild
    with StreamLoader(str(root), batch_size=4, decode="cpu-open", device="cpu", num_workers=2,
                      image_dtype="uint8") as loader:
        for _ in range(2):
            for _ in loader:
                pass
        stats = loader.stats()["engines"]["cpu-open"]
    assert stats["threads"] == 2
    assert stats["decoders_opened"] <= 2 * len(CAMERAS)
    assert stats["feeds"] >= 10 * stats["decoders_opened"]


class DroppingDecoder(AvPacketDecoder):
    """FFmpeg's decoder that loses the picture of one feed time, as a decoder that drops a frame would."""

    def decode(self, feed):
        got, convert_s = super().decode(feed)
        got.pop(int(feed.asked[-1][-1]))
        return got, convert_s


def test_a_picture_the_decoder_drops_is_a_named_error_never_a_shifted_frame(wild):
    root, _ = wild
    key = "observation.images.side"
    with StreamLoader(str(root), batch_size=2, decode="cpu-open", device="cpu", num_workers=0) as loader:
        _, seg, idx = next(episode_segments(loader, key))
    engine = OpenDecoders(lambda codec, camera: DroppingDecoder(codec), 1, CPU_OPEN)
    try:
        with pytest.raises(DecodeError, match=rf"got no picture for frames \[{int(idx[5])}\] of episode {seg.episode}, "
                                              rf"camera '{key}' \(cut from .*decode=\{{'{key}': 'cpu'\}}"):
            engine.decode(key, [seg, seg], [idx[[1, 2]], idx[[5]]])
        frames, decoded = OpenDecoders(lambda codec, camera: AvPacketDecoder(codec), 1, CPU_OPEN).decode(
            key, [seg, seg], [idx[[1, 2]], idx[[5]]])
        assert decoded == 3 and [read_ids(f)[1] for f in frames] == [1, 2, 5]
    finally:
        engine.close()


def test_engine_frames_in_groups_beside_joined_dali_streams_and_torchcodec(wild):
    """The engine's external source beside the main one, the graph's batch in groups (a DALI-decoded camera joins
    its clips, 3 samples a group): every frame right, windows past both ends."""
    root, cameras = wild
    decode = {"observation.images.front": "cpu-open", "observation.images.side": "cpu-open",
              "observation.images.wrist": "cpu", "observation.images.top": "dali-cpu"}
    held = dict(episode_frames_bytes=0)  # decoded per sample: VP9 in the graph
    with StreamLoader(str(root), batch_size=6, decode=decode, device="cpu", join_streams=2, **held) as loader:
        assert loader.routes["observation.images.top"] == "dali-cpu" and loader.resolved.join_streams == 2
    check_every_frame(root, 30, cameras, decode=decode, windowed=True, join_streams=2, **held)


def test_resume_on_the_engine_is_pixel_exact(wild):
    root, _ = wild
    settings = dict(batch_size=4, decode="cpu-open", device="cpu", seed=3, image_dtype="uint8",
                    delta_timestamps={"observation.images.side": [-1 / 30, 0.0]})
    with StreamLoader(str(root), **settings) as loader:
        it = iter(loader)
        next(it), next(it)
        state = loader.state_dict()
        want = [next(it) for _ in range(3)]
        it.close()
    with StreamLoader(str(root), **settings) as resumed:
        resumed.load_state_dict(state)
        got = [b for _, b in zip(range(3), resumed)]
    for a, b in zip(want, got):
        for k in ("observation.images.front", "observation.images.side", "episode_index", "frame_index"):
            assert torch.equal(a[k], b[k]), k


def test_nvdec_engine_choice():
    """`nvdec_engine`: auto keeps DALI's engine until decode/proven.py lists the open one on this GPU, and says so;
    open and dali are obeyed; NVDEC cameras move to the nvdec-open route, the others stay."""
    assert nvdec_engine("auto", "not proven here")[0] == "dali"
    assert "not proven here" in nvdec_engine("auto", "not proven here")[1]
    assert nvdec_engine("auto", None)[0] == "open"
    assert nvdec_engine("open", "not proven here")[0] == "open"
    assert nvdec_engine("dali", None)[0] == "dali"
    choices = {"a": RouteChoice(NVDEC, "NVDEC decodes h264"), "b": RouteChoice(TORCHCODEC, "cpu")}
    moved = open_routes(choices, "open", "why")
    assert moved["a"].route == "nvdec-open" and moved["b"] == choices["b"]
    assert open_routes(choices, "dali", "why")["a"].route == "nvdec"


def test_cpu_open_needs_no_gpu_and_says_so_in_its_reason(wild):
    root, _ = wild
    with StreamLoader(str(root), batch_size=2, decode={"observation.images.front": "cpu-open"}, device="cpu") as loader:
        assert loader.routes["observation.images.front"] == "cpu-open"
        assert "open-decoder engine on the CPU" in loader.route_reasons["observation.images.front"]
        assert set(loader.stats()["engines"]) == {"cpu-open"}
