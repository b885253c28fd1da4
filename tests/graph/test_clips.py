"""Per-sample clips for DALI's decoder: the work per sample does not grow with a frame's depth in its episode,
and the clip holds exactly the frames asked for (H.264 with B-frames and HEVC decoded by torchcodec, VP9
through DALI's CPU decoder in the loader)."""

from __future__ import annotations

import numpy as np
import pytest

from dali_stream import StreamLoader
from dali_stream.decode.cpu import open_decoder
from dali_stream.fetch.indexes import IndexCache
from dali_stream.fetch.segments import cut_segment
from dali_stream.graph.clips import dali_input
from dali_stream.meta.dataset import DatasetMeta
from dali_stream.source.storage import LocalRanges
from dali_stream.tools.paint import read_ids

GOP = 30


@pytest.fixture(scope="module")
def long_episodes(tmp_path_factory):
    """Two episodes of ~950 frames (GOP 30): VP9 (DALI's CPU route), H.264 with B-frames and HEVC."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=2, min_length=920, max_length=960, height=32, width=64, gop=GOP,
                      episodes_per_file=2, cameras=parse_cameras("top:vp9,front:h264,side:hevc"), seed=5)
    return write_sample(tmp_path_factory.mktemp("clips") / "long", spec)


def _segment(root, pos, key, indexed: bool = False):
    """The episode's segment (it starts at the keyframe at or before the episode) and its first frame's time:
    remuxed by PyAV through the demuxer, or written by mp4write from the file's index (what the loader does)."""
    meta = DatasetMeta.open(str(root))
    cam = meta.cameras[key]
    start = float(cam.from_timestamp[pos])
    fs, index = meta.data_fs, None
    if indexed:
        fs = LocalRanges(meta.data_fs)
        index = IndexCache(fs).get(meta.video_file(pos, key))
        assert index is not None
    return meta, start, cut_segment(fs, meta.video_file(pos, key), start, float(cam.to_timestamp[pos]),
                                    episode=pos, camera=key, codec=cam.codec, tolerance_s=1e-4,
                                    last_frame_s=start + (int(meta.lengths[pos]) - 1) / meta.fps, indexed=index)


@pytest.mark.parametrize("indexed", [False, True], ids=["remuxed-segment", "written-segment"])
@pytest.mark.parametrize("key", ["observation.images.front", "observation.images.side", "observation.images.top"])
def test_a_clip_decodes_to_the_frames_asked_for(long_episodes, key, indexed):
    """Clips are written by mp4write from the segment's own sample table, whichever way the segment was made
    (PyAV's muxer writes an edit list for B-frames; mp4write none)."""
    meta, start, seg = _segment(long_episodes, 1, key, indexed)
    assert seg.packets().stsd is not None
    rng = np.random.default_rng(0)
    episode, length = meta.episode_index(1), int(meta.lengths[1])
    for first in [0, 1, 29, 30, 31, 400, length - 3]:
        wanted = rng.permutation(np.clip(first + np.array([0, 0, 1, 2, 7, 2]), 0, length - 1))  # repeats, unsorted
        clip = dali_input(seg, seg.frame_indices(start + wanted / meta.fps, 1e-4, "test"))
        assert clip.frames_fed <= GOP + 8, (first, clip.frames_fed)  # a GOP plus the span, at any depth
        frames = open_decoder(clip.data.tobytes()).get_frames_at(indices=clip.frames.tolist()).data.numpy()
        got = [read_ids(frames[i]) for i in clip.order]
        assert got == [(episode, int(w)) for w in wanted], (key, first)


def test_dali_work_per_sample_is_flat_in_frame_depth(long_episodes):
    """The loader (VP9 through DALI's CPU decoder) draws frames hundreds deep; DALI works through at most a
    GOP plus the window per sample, and every frame shows its planned ids."""
    key = "observation.images.top"
    loader = StreamLoader(str(long_episodes), batch_size=4, episode_pool_size=2, seed=3, device="cpu",
                          image_dtype="uint8", decode={key: "dali-cpu", "observation.images.front": "cpu",
                                                      "observation.images.side": "cpu"},
                          delta_timestamps={key: [-2 / 30, -1 / 30, 0.0]}, episode_frames_bytes=0)
    assert loader.routes[key] == "dali-cpu"
    depths = []
    for n, batch in enumerate(loader):
        imgs = batch[key].numpy()
        for i, (ep, fr) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
            assert [read_ids(f) for f in imgs[i]] == [(ep, max(fr + d, 0)) for d in (-2, -1, 0)]
            depths.append(fr)
        if n == 15:
            break
    dali = loader.stats()["build"]["dali"]
    samples, frames_fed = (sum(c[k] for c in dali.values()) for k in ("samples", "frames_fed"))
    assert np.mean(depths) > 200
    assert samples >= 16 * 4 and frames_fed / samples <= GOP + 2  # built ahead too


def test_dali_on_the_workers_decodes_runs_of_nearby_frames_in_one_clip(long_episodes):
    """DALI's CPU decoder on the workers (`graph.dali_on_workers`, the decoded-frame cache's VP9 route): a segment's
    frames asked for in one batch go as one clip per run of nearby frames, so the work stays a GOP plus the span
    per run at any depth, and every frame shows its ids."""
    from dali_stream.graph.dali_on_workers import DaliFrames, runs

    key = "observation.images.top"
    meta, start, seg = _segment(long_episodes, 1, key, indexed=True)
    episode, length = meta.episode_index(1), int(meta.lengths[1])
    wanted = np.array([5, 6, 7, 9, 400, 401, 470, length - 1])
    idx = seg.frame_indices(start + wanted / meta.fps, 1e-4, "test")
    assert [r.tolist() for r in runs(seg, idx)] == [idx[:4].tolist(), idx[4:6].tolist(), [idx[6]], [idx[7]]]
    decoder = DaliFrames(max_clips=2)  # two pipeline calls
    other = np.array([0, 450])
    got, again = decoder([(seg, idx), (seg, seg.frame_indices(start + other / meta.fps, 1e-4, "test"))])
    assert [read_ids(f) for f in got] == [(episode, int(w)) for w in wanted]
    assert [read_ids(f) for f in again] == [(episode, int(w)) for w in other]
    assert decoder.clips == 6 and decoder.frames_fed <= 6 * (GOP + 4), decoder.frames_fed
    decoder.close()
