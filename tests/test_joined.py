"""Joined streams (graph/joined.py, issue 25): a batch's clips of one camera as a few streams, one decoder session
each. Every frame checked by its painted ids: the streams through torchcodec for every codec as lerobot's recorder
and a continuous encode write them (H.264 with B-frames, HEVC open and closed GOP, AV1, VP9), through DALI's CPU
decoder for VP9, and the loader's batches with and without joining. NVDEC runs the same in tests/test_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from dali_stream import StreamLoader
from dali_stream.decode.cpu import open_decoder
from dali_stream.errors import ConfigError
from dali_stream.graph.joined import codec_config, join_inputs
from dali_stream.tools.paint import read_ids
from tests.test_boundaries import CAMERAS, boundary_dataset

WINDOW = [-2, -1, 0, 1, 2]


@pytest.fixture(scope="module", params=["lerobot-g2", "continuous-g30"])
def dataset(request, tmp_path_factory):
    recorder, gop = {"lerobot-g2": ("lerobot", 2), "continuous-g30": ("dali_stream", 30)}[request.param]
    return boundary_dataset(tmp_path_factory.mktemp("joined") / request.param, recorder, gop, 30, "yuv420p", CAMERAS)


def planned_batches(root, key: str, windowed: bool, batches: int = 6, batch_size: int = 9):
    """(segments, frame indices, wanted ids) per sample of the first batches of a shuffled epoch, from the loader's
    own plans and its own segment lookup (a loader on torchcodec: nothing here goes through DALI)."""
    deltas = {key: [s / 30 for s in WINDOW]} if windowed else {}
    steps = WINDOW if windowed else [0]
    with StreamLoader(str(root), batch_size=batch_size, delta_timestamps=deltas, episode_pool_size=3, seed=5,
                      decode="cpu", device="cpu", num_workers=0) as loader:
        lengths = {int(e): int(n) for e, n in zip(loader.meta.episodes["episode_index"], loader.meta.lengths)}
        out = []
        for b in range(min(batches, len(loader))):
            plan = loader.batch_plan(0, b)
            rows = [loader.store.rows(int(p)) for p in plan.episodes]
            segs, idx = loader.builder.locate(plan, rows, key)
            want = []
            for p, f in zip(plan.episodes, plan.frames):
                ep = int(loader.meta.episode_index(int(p)))
                want.append([(ep, min(max(int(f) + s, 0), lengths[ep] - 1)) for s in steps])
            out.append((segs, idx, want))
    return out


def frames_by_slot(joined, decode) -> list[list[tuple[int, int]]]:
    """Each sample's painted ids: its lead's stream decoded by `decode(data, frames)` -> (N, H, W, 3), permuted to
    the sample (`source`) and rearranged (`order`), as graph.pipeline does."""
    decoded = {j: decode(joined.encoded[j].tobytes(), joined.frames[j].tolist())
               for j in range(len(joined.lead)) if bool(joined.lead[j])}
    return [[read_ids(img) for img in decoded[int(src)][order]] for src, order in zip(joined.source, joined.order)]


def torchcodec_decode(data: bytes, frames: list[int]) -> np.ndarray:
    return open_decoder(data).get_frames_at(indices=frames).data.numpy()


@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
@pytest.mark.parametrize("streams", [1, 4, 9], ids=["1", "4", "per-sample"])  # 9: a batch's clips each alone
@pytest.mark.parametrize("camera", sorted(CAMERAS))
def test_joined_streams_show_the_planned_frames_through_torchcodec(dataset, camera, streams, windowed):
    """Streams of clips starting at any keyframe (HEVC CRA pictures with leading pictures, spliced to BLA) and
    windows crossing episode ends; with 9 streams every sample's clip is its own stream, as NVDEC's per-sample
    route gets it."""
    key = f"observation.images.{camera}"
    for segs, idx, want in planned_batches(dataset, key, windowed):
        joined = join_inputs(segs, idx, streams)
        assert frames_by_slot(joined, torchcodec_decode) == want
        assert 1 <= joined.streams <= streams
        assert sorted(j for slots in joined.members.values() for j in slots) == list(range(len(segs)))
        assert all(int(joined.source[j]) == lead for lead, slots in joined.members.items() for j in slots)


@pytest.mark.parametrize("streams", [1, 3])
def test_joined_vp9_streams_show_the_planned_frames_through_dalis_cpu_decoder(dataset, streams):
    from dali_stream.graph.pipeline import decode_once

    for segs, idx, want in planned_batches(dataset, "observation.images.top", True):
        joined = join_inputs(segs, idx, streams)
        assert frames_by_slot(joined, lambda data, frames: decode_once(data, frames, "dali-cpu")) == want


def test_samples_on_the_same_clip_share_it(dataset):
    """Nine samples of one frame: one clip in the stream, one frame decoded, handed to all nine."""
    segs, idx, _ = planned_batches(dataset, "observation.images.front", False, batches=1)[0]
    joined = join_inputs([segs[0]] * 9, [idx[0]] * 9, 1)
    assert joined.streams == 1 and len(joined.frames[0]) == 1
    assert [int(s) for s in joined.source] == [0] * 9
    single = join_inputs([segs[0]], [idx[0]], 1)  # one sample: its own clip, as the per-sample route cuts it
    assert joined.frames_fed == single.frames_fed


def test_clips_of_other_codec_configurations_get_streams_of_their_own(dataset, tmp_path):
    """Files of one camera encoded apart (here another size) cannot share a stream: one per configuration, each
    right."""
    other = boundary_dataset(tmp_path / "other", "dali_stream", 30, 30, "yuv420p", {"top": "vp9"}, height=64, width=80)
    key = "observation.images.top"
    a_segs, a_idx, a_want = planned_batches(dataset, key, False, batches=1)[0]
    b_segs, b_idx, b_want = planned_batches(other, key, False, batches=1)[0]
    assert codec_config(a_segs[0].packets()) != codec_config(b_segs[0].packets())
    segs, idx = a_segs[:4] + b_segs[:4] + a_segs[4:6], a_idx[:4] + b_idx[:4] + a_idx[4:6]
    joined = join_inputs(segs, idx, 1)
    assert joined.streams == 2
    assert sorted(map(sorted, joined.members.values())) == [[0, 1, 2, 3, 8, 9], [4, 5, 6, 7]]
    assert frames_by_slot(joined, torchcodec_decode) == a_want[:4] + b_want[:4] + a_want[4:6]


@pytest.mark.parametrize("join_streams", [None, 1, 0])
def test_loader_batches_are_the_same_joined_or_per_sample(tmp_path_factory, join_streams):
    """VP9 through DALI's CPU decoder in the graph, windows crossing episode ends, a partial last batch: the
    batches with joined streams equal the per-sample route's, and the streams opened are counted."""
    root = tmp_path_factory.getbasetemp() / "joined-loader"
    if not (root / "meta" / "info.json").exists():
        boundary_dataset(root, "dali_stream", 2, 30, "yuv420p", {"top": "vp9", "front": "h264"})
    key = "observation.images.top"
    settings = dict(batch_size=7, delta_timestamps={key: [s / 30 for s in WINDOW]}, episode_pool_size=3, seed=1,
                    decode="auto", device="cpu", num_workers=2, drop_last=False, image_dtype="uint8")
    with StreamLoader(str(root), **settings, join_streams=0) as loader:
        assert loader.routes[key] == "dali-cpu" and loader.join_streams == {key: 0}
        per_sample = [(b["index"].tolist(), b[key].numpy()) for b in loader]
        assert loader.builder.dali_streams == loader.builder.dali_samples == sum(len(i) for i, _ in per_sample)
    with StreamLoader(str(root), **settings, join_streams=join_streams) as loader:
        streams = loader.join_streams[key]
        assert streams == (loader.dali_threads if join_streams is None else join_streams)
        joined = [(b["index"].tolist(), b[key].numpy()) for b in loader]
        if streams:
            assert loader.builder.dali_streams <= streams * len(joined) < loader.builder.dali_samples
    assert [i for i, _ in joined] == [i for i, _ in per_sample]
    for (_, a), (_, b) in zip(joined, per_sample):
        np.testing.assert_array_equal(a, b)


def test_join_streams_is_validated():
    with pytest.raises(ConfigError, match="join_streams"):
        StreamLoader("unused", join_streams=-1)


def _open_gop_h264(frames: int = 40) -> bytes:
    """H.264 as x264 writes it with open-gop=1: keyframes after the first are I pictures without IDR."""
    import io

    import av

    from dali_stream.tools.paint import render

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=30, options={
            "bf": "3", "g": "8", "crf": "18", "x264-params": "open-gop=1:keyint=8:min-keyint=8:scenecut=0"})
        stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
        for f in range(frames):
            for packet in stream.encode(av.VideoFrame.from_ndarray(render(96, 128, 0, f), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def test_clips_from_keyframes_without_idr_get_streams_of_their_own():
    """An H.264 I picture without IDR does not reset the decoder (FFmpeg withholds the frames after it in a short
    clip; its picture order counts would continue the previous clip's): clips start at the last IDR instead, so
    they all join here, and every frame is the planned one."""
    from dali_stream.fetch import nal
    from dali_stream.fetch.segments import Segment, packet_index

    data = _open_gop_h264()
    index = packet_index(data)
    keys = np.flatnonzero(index.key)
    starts = [nal.starts_stream(index.stsd, data[int(index.pos[k]):int(index.pos[k] + index.size[k])]) for k in keys]
    assert starts[0] and not any(starts[1:]), starts
    seg = Segment(data, np.sort(index.pts) * float(index.time_base), "open-gop.mp4", 0, "cam", "h264")
    picks = [np.array([f]) for f in (1, 3, 9, 17, 30, 2, 12)]
    joined = join_inputs([seg] * len(picks), picks, 1)
    assert joined.streams == 1
    assert all(seg.resets()[:1]) and not seg.resets()[keys[1:]].any()
    assert frames_by_slot(joined, torchcodec_decode) == [[(0, int(p[0]))] for p in picks]
