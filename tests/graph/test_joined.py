"""Joined streams (graph/joined.py): a batch's samples in groups, each group's clips of one camera as one
stream, one decoder per group. Every frame checked by its painted ids: the streams through torchcodec for
every codec as lerobot's recorder and a continuous encode write them (H.264 with B-frames, HEVC open and closed
GOP, AV1, VP9), through DALI's CPU decoder for VP9, and the loader's batches with and without joining. NVDEC runs
the same in tests/gpu/test_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from dali_stream import StreamLoader
from dali_stream.decode.cpu import open_decoder
from dali_stream.errors import ConfigError
from dali_stream.graph.joined import codec_config, group_sizes, join_group
from dali_stream.tools.paint import read_ids
from tests.loader.test_boundaries import CAMERAS, boundary_dataset

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
            segs, idx = loader.locate(plan, key)
            want = []
            for p, f in zip(plan.episodes, plan.frames):
                ep = int(loader.meta.episode_index(int(p)))
                want.append([(ep, min(max(int(f) + s, 0), lengths[ep] - 1)) for s in steps])
            out.append((segs, idx, want))
    return out


def joined_ids(segs, idx, members: int, decode) -> list[list[tuple[int, int]]] | None:
    """Each sample's painted ids through groups of `members` (`join_group`): each group's stream decoded by
    `decode(data, frames)` -> (N, H, W, 3) and laid out by its `order`, member by member, as the graph does.
    None when some group cannot be one stream."""
    out = []
    for g in range(0, len(segs), members):
        stream = join_group(segs[g:g + members], idx[g:g + members])
        if stream is None:
            return None
        images = decode(stream.data.tobytes(), stream.frames.tolist())[stream.order]
        steps = len(images) // len(segs[g:g + members])
        out += [[read_ids(img) for img in images[m * steps:(m + 1) * steps]] for m in range(len(segs[g:g + members]))]
    return out


def torchcodec_decode(data: bytes, frames: list[int]) -> np.ndarray:
    return open_decoder(data).get_frames_at(indices=frames).data.numpy()


@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
@pytest.mark.parametrize("members", [9, 3, 1], ids=["one-group", "3-groups", "per-sample"])
@pytest.mark.parametrize("camera", sorted(CAMERAS))
def test_joined_streams_show_the_planned_frames_through_torchcodec(dataset, camera, members, windowed):
    """Streams of clips starting at any keyframe (HEVC CRA pictures with leading pictures, spliced to BLA) and
    windows crossing episode ends; groups of one are the per-sample clips NVDEC's per-sample route gets."""
    from dali_stream.fetch.pictures import one_picture_per_packet

    key = f"observation.images.{camera}"
    joined = 0
    for segs, idx, want in planned_batches(dataset, key, windowed):
        got = joined_ids(segs, idx, members, torchcodec_decode)
        if got is None:  # refused where packets hide pictures (SVT-AV1's hidden frames: fetch/pictures.py)
            assert members > 1 and any(not one_picture_per_packet(seg.codec, _packet_bytes(seg)) for seg in segs)
        else:
            assert got == want
            joined += 1
    assert joined or camera == "wrist", "no batch of this camera was joined"


def _packet_bytes(seg):
    index = seg.packets()
    return [seg.data[int(p):int(p + n)] for p, n in zip(index.pos, index.size)]


@pytest.mark.parametrize("members", [9, 3])
def test_joined_vp9_streams_show_the_planned_frames_through_dalis_cpu_decoder(dataset, members):
    from dali_stream.decode.route import DALI_CPU
    from dali_stream.graph.pipeline import decode_once

    for segs, idx, want in planned_batches(dataset, "observation.images.top", True):
        got = joined_ids(segs, idx, members, lambda data, frames: decode_once(data, frames, DALI_CPU))
        assert got == want


def test_group_sizes_are_equal_and_at_most_the_streams_asked():
    assert [group_sizes(16, g) for g in (1, 2, 7, 16, 40)] == [16, 8, 4, 1, 1]
    assert [group_sizes(64, 7), group_sizes(13, 7), group_sizes(13, 13), group_sizes(12, 5)] == [16, 13, 1, 3]


def test_samples_on_the_same_clip_share_it(dataset):
    """Nine samples of one frame: one clip in the stream, one frame decoded, laid out for all nine."""
    segs, idx, _ = planned_batches(dataset, "observation.images.front", False, batches=1)[0]
    stream = join_group([segs[0]] * 9, [idx[0]] * 9)
    assert len(stream.frames) == 1 and stream.order.tolist() == [0] * 9
    assert stream.frames_fed == join_group([segs[0]], [idx[0]]).frames_fed


def test_clips_of_other_codec_configurations_do_not_share_a_stream(dataset, tmp_path):
    """Files of one camera encoded apart (here another size) cannot share a stream: such a group is refused (the
    builder then decodes the batch one clip per sample), groups of one configuration each are right."""
    other = boundary_dataset(tmp_path / "other", "dali_stream", 30, 30, "yuv420p", {"top": "vp9"}, height=64, width=80)
    key = "observation.images.top"
    a_segs, a_idx, a_want = planned_batches(dataset, key, False, batches=1)[0]
    b_segs, b_idx, b_want = planned_batches(other, key, False, batches=1)[0]
    assert codec_config(a_segs[0].packets()) != codec_config(b_segs[0].packets())
    assert join_group(a_segs[:2] + b_segs[:2], a_idx[:2] + b_idx[:2]) is None
    assert joined_ids(a_segs[:3] + b_segs[:3], a_idx[:3] + b_idx[:3], 3, torchcodec_decode) == a_want[:3] + b_want[:3]


@pytest.mark.parametrize("join_streams", [None, 1, 0])
def test_loader_batches_are_the_same_joined_or_per_sample(tmp_path_factory, join_streams):
    """VP9 through DALI's CPU decoder in the graph, windows crossing episode ends, a partial last batch: the
    batches with joined streams equal the per-sample route's, and the streams opened are counted."""
    root = tmp_path_factory.getbasetemp() / "joined-loader"
    if not (root / "meta" / "info.json").exists():
        boundary_dataset(root, "dali_stream", 2, 30, "yuv420p", {"top": "vp9", "front": "h264"})
    key = "observation.images.top"
    settings = dict(batch_size=8, delta_timestamps={key: [s / 30 for s in WINDOW]}, episode_pool_size=3, seed=1,
                    decode="dali-cpu", device="cpu", num_workers=2, drop_last=False, image_dtype="uint8",
                    episode_frames_bytes=0)  # decoded per sample: VP9 in the graph
    def batches(loader):
        return [{k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in b.items()} for b in loader]

    with StreamLoader(str(root), **settings, join_streams=0) as loader:
        assert loader.routes[key] == "dali-cpu" and loader.resolved.join_streams == 0
        per_sample = batches(loader)
        counts = loader.stats()["build"]["dali"][key]
        assert counts["samples"] == counts["streams"] == sum(len(b["index"]) for b in per_sample), counts
    with StreamLoader(str(root), **settings, join_streams=join_streams) as loader:
        streams = loader.resolved.join_streams
        assert streams == (loader.resolved.dali_threads if join_streams is None else join_streams)
        joined = batches(loader)
        if streams:
            dali = loader.stats()["build"]["dali"].values()
            opened, samples = sum(c["streams"] for c in dali), sum(c["samples"] for c in dali)
            assert opened <= streams * len(joined) < samples
    assert len(joined) == len(per_sample) and len(per_sample[-1]["index"]) == 6  # a short last batch too
    for a, b in zip(joined, per_sample):
        assert a.keys() == b.keys()
        for k in a:
            if k == "task":
                assert a[k] == b[k]
            else:
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)


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
    assert joined_ids([seg] * len(picks), picks, len(picks), torchcodec_decode) == [[(0, int(p[0]))] for p in picks]
