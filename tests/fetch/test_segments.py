"""Per-episode segments: cut by real pts, decodable alone, and clear errors for broken files."""

from __future__ import annotations

import numpy as np
import pytest

from dali_stream.decode.cpu import torchcodec_frames
from dali_stream.errors import DecodeError, VideoFileError
from dali_stream.fetch.segments import cut_segment
from dali_stream.meta.dataset import DatasetMeta
from dali_stream.tools.paint import read_ids


def _cut(meta, pos, key, path=None):
    cam = meta.cameras[key]
    start = float(cam.from_timestamp[pos])
    return cut_segment(meta.fs, path or meta.video_file(pos, key), start, float(cam.to_timestamp[pos]),
                       episode=pos, camera=key, codec=cam.codec, tolerance_s=1e-4,
                       last_frame_s=start + (int(meta.lengths[pos]) - 1) / meta.fps)


@pytest.mark.parametrize("camera", ["front", "side", "wrist", "top"])
def test_every_frame_of_every_episode_by_pts(four_codec_dataset, camera):
    meta = DatasetMeta.open(str(four_codec_dataset))
    key = f"observation.images.{camera}"
    for pos in range(meta.num_episodes):
        seg = _cut(meta, pos, key)
        L = int(meta.lengths[pos])
        start = float(meta.cameras[key].from_timestamp[pos])
        assert seg.pts_s[0] <= start + 1e-6  # begins at the keyframe at or before the episode
        idx = seg.frame_indices(start + np.arange(L) / meta.fps, 1e-4, "test")
        frames = torchcodec_frames(seg, idx)
        assert [read_ids(f) for f in frames] == [(pos, f) for f in range(L)]
        shares_file = [p for p in range(meta.num_episodes) if meta.video_file(p, key) == meta.video_file(pos, key)]
        if len(shares_file) > 1:  # a packed file: the segment holds only this episode's GOPs
            assert seg.nbytes < meta.fs.size(meta.video_file(pos, key))


def test_one_frame_asks_find_the_frames_a_window_finds(four_codec_dataset):
    """A sample without a window asks one time (`frame_indices`' bisect path): the same index as the same time asked
    within a window (the numpy path), at every frame and between frames; a time beyond the tolerance raises the
    same error naming the episode, camera and times."""
    from dali_stream.errors import FrameTimestampError

    meta = DatasetMeta.open(str(four_codec_dataset))
    key = "observation.images.side"
    seg = _cut(meta, 1, key)
    start, gap = float(meta.cameras[key].from_timestamp[1]), 1 / meta.fps
    times = start + np.concatenate([np.arange(int(meta.lengths[1])) * gap + d for d in (0, 0.3 * gap, -0.49 * gap)])
    window = seg.frame_indices(np.concatenate([times, [start]]), gap / 2, "test")[:-1]
    assert [int(seg.frame_indices(times[i:i + 1], gap / 2, "test")[0]) for i in range(len(times))] == window.tolist()
    assert seg.frame_indices(times[:1], gap / 2, "test").dtype == window.dtype
    late = np.array([float(seg.pts_s[-1]) + 3 * gap])
    for asked in (late, np.concatenate([late, [start]])):  # one time, and in a window
        with pytest.raises(FrameTimestampError, match=r"episode 1, camera 'observation.images.side' \(test\): no "
                                                      r"frame within tolerance_s="):
            seg.frame_indices(asked, gap / 2, "test")


def test_missing_file(four_codec_dataset):
    meta = DatasetMeta.open(str(four_codec_dataset))
    with pytest.raises(VideoFileError, match=r"is missing \(episode 2, camera 'observation.images.front'\)"):
        _cut(meta, 2, "observation.images.front", path=str(four_codec_dataset / "videos/nope.mp4"))


def test_truncated_file(four_codec_dataset, tmp_path):
    meta = DatasetMeta.open(str(four_codec_dataset))
    key = "observation.images.top"
    pos = next(p for p in range(meta.num_episodes) if meta.cameras[key].from_timestamp[p] > 0)
    data = (four_codec_dataset / meta.video_file(pos, key)).read_bytes()
    cut = tmp_path / "cut.mp4"
    # Keep the header and moov (at the end for PyAV's mp4 muxer) but lose the end of the media data.
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(VideoFileError, match="truncated|not a readable MP4"):
        _cut(meta, pos, key, path=str(cut))


def test_not_a_video(four_codec_dataset, tmp_path):
    meta = DatasetMeta.open(str(four_codec_dataset))
    lfs = tmp_path / "lfs.mp4"
    lfs.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
    with pytest.raises(VideoFileError, match=r"not a readable MP4 .*first bytes b'version https://git-lfs"):
        _cut(meta, 0, "observation.images.front", path=str(lfs))


def test_corrupt_segment_is_a_decode_error(four_codec_dataset):
    meta = DatasetMeta.open(str(four_codec_dataset))
    seg = _cut(meta, 1, "observation.images.wrist")
    seg.data = seg.data[:40] + bytes(len(seg.data) - 40)
    with pytest.raises(DecodeError, match=r"torchcodec could not decode episode 1, camera 'observation.images.wrist'"):
        torchcodec_frames(seg, np.array([0, 3]))


def test_samples_bytes_in_one_run_and_interleaved():
    """An indexed segment's samples: one slice when they lie back to back (video-only files), gathered one by
    one when other data sits between them (e.g. an audio track interleaved)."""
    from dali_stream.fetch.segments import samples_bytes

    data = bytes(range(100))
    run = samples_bytes(data, 10, np.array([10, 13, 20]), np.array([3, 7, 5]))
    assert run == data[0:15]
    assert samples_bytes(data, 10, np.array([20, 23]), np.array([3, 4])) == data[10:17]
    gathered = samples_bytes(data, 10, np.array([10, 20, 40]), np.array([3, 5, 2]))
    assert gathered == data[0:3] + data[10:15] + data[30:32]


def test_written_segment_refuses_a_payload_of_another_size():
    from dali_stream.fetch.mp4write import write_mp4

    one = np.array([1])
    with pytest.raises(ValueError, match="1 samples of 4 bytes, payload of 3"):
        write_mp4(b"", 1000, np.array([4]), one, one, one, np.array([True]), b"abc")


@pytest.mark.parametrize("camera", ["front", "side", "wrist", "top"])
def test_a_reused_decoder_returns_the_asked_frames_whatever_it_decoded_before(four_codec_dataset, camera):
    """The loader keeps torchcodec decoders across batches (`DecoderCache`): one decoder asked for random sorted
    index sets, forwards and backwards across GOPs, returns the frames a fresh decoder returns."""
    from dali_stream.decode.cpu import DecoderCache

    meta = DatasetMeta.open(str(four_codec_dataset))
    key = f"observation.images.{camera}"
    rng = np.random.default_rng(7)
    cache = DecoderCache(capacity=1)
    for pos in range(0, meta.num_episodes, 3):
        seg = _cut(meta, pos, key)
        truth = [read_ids(f) for f in torchcodec_frames(seg, np.arange(len(seg.pts_s)))]
        for _ in range(25):
            idx = np.unique(rng.integers(0, len(seg.pts_s), int(rng.integers(1, 4))))
            got = [read_ids(f) for f in torchcodec_frames(seg, idx, cache)]
            assert got == [truth[i] for i in idx], (pos, idx.tolist())
        assert cache.opened == 1 + pos // 3  # one decoder per segment, reused for every call


def test_a_cut_knows_its_packets_as_reading_it_back_gives_them(four_codec_dataset):
    """An indexed cut's packet index is computed from what was written (`written_packets`), not parsed back: the
    same arrays as parsing the written MP4, on every codec, for whole episodes and for pieces (whose index points
    into their samples, `body`, until their MP4 is written: the same bytes there)."""
    from dali_stream.fetch.indexes import IndexCache
    from dali_stream.fetch.segments import cut_segment, indexed_segment, indexed_span, packet_index
    from dali_stream.meta.dataset import DatasetMeta
    from dali_stream.source.storage import LocalRanges

    meta = DatasetMeta.open(str(four_codec_dataset))
    ranges = LocalRanges(meta.data_fs)
    indexes = IndexCache(ranges)
    checked = 0
    for key, cam in meta.cameras.items():
        for pos in range(meta.num_episodes):
            path = meta.video_file(pos, key)
            indexed = indexes.get(path)
            start, end = float(cam.from_timestamp[pos]), float(cam.to_timestamp[pos])
            for a, b in ((start, end), (start + (end - start) / 2, start + (end - start) / 2 + 0.05)):
                where = dict(episode=pos, camera=key, tolerance_s=1e-4)
                if a == start:
                    seg = cut_segment(ranges, path, a, b, codec=cam.codec, last_frame_s=a, indexed=indexed, **where)
                else:
                    span = indexed_span(path, a, b, indexed, **where)
                    seg = indexed_segment(ranges.read_range(path, span.start, span.end), span.start, span, path,
                                          indexed, codec=cam.codec, last_frame_s=a, piece=True, **where)
                    assert len(seg.body) < len(seg.data)
                known, parsed = seg.packets(), packet_index(seg.data)
                for name in ("size", "pts", "dts", "duration", "key"):
                    assert np.array_equal(getattr(known, name), getattr(parsed, name)), (key, pos, name)
                assert (known.time_base, known.stsd) == (parsed.time_base, parsed.stsd)
                for k in range(len(known.pos)):
                    assert seg.body[known.pos[k]:known.pos[k] + known.size[k]] == \
                        seg.data[parsed.pos[k]:parsed.pos[k] + parsed.size[k]]
                checked += 1
    assert checked == 2 * len(meta.cameras) * meta.num_episodes


def test_indexes_beyond_their_bound_are_dropped_and_read_again_the_same(four_codec_dataset):
    """An index cache smaller than one file's index keeps only the last file asked for; a file asked for again is
    indexed again to the same arrays, and its segments carry the same frames. What is kept is the index alone (no
    demuxer left open beside it, no bytes of the read): what the bound weighs."""
    from dali_stream.fetch.indexes import IndexCache, _index_bytes
    from dali_stream.fetch.segments import cut_segment
    from dali_stream.meta.dataset import DatasetMeta
    from dali_stream.source.storage import LocalRanges

    meta = DatasetMeta.open(str(four_codec_dataset))
    ranges = LocalRanges(meta.data_fs)
    paths = sorted({meta.video_file(pos, key) for key in meta.cameras for pos in range(meta.num_episodes)})
    first = {p: IndexCache(ranges).get(p) for p in paths}
    tiny = IndexCache(ranges, capacity_bytes=1)
    for round_ in range(2):
        for path in paths:
            got = tiny.get(path)
            assert vars(got) == {"index": got.index} and got.index.pieces == ()
            for name in ("offsets", "sizes", "dts", "pts", "durations", "sync"):
                assert np.array_equal(getattr(got.index, name), getattr(first[path].index, name)), (path, name)
            assert tiny.files.nbytes == _index_bytes(got), "only the file just asked for is kept"
    assert tiny.files.evictions >= 2 * len(paths) - 1
    key, cam = next(iter(meta.cameras.items()))
    for pos in range(meta.num_episodes):
        path = meta.video_file(pos, key)
        a, b = float(cam.from_timestamp[pos]), float(cam.to_timestamp[pos])
        where = dict(episode=pos, camera=key, codec=cam.codec, tolerance_s=1e-4, last_frame_s=a)
        again = cut_segment(ranges, path, a, b, indexed=tiny.get(path), **where)
        kept = cut_segment(ranges, path, a, b, indexed=first[path], **where)
        assert again.data == kept.data and np.array_equal(again.pts_s, kept.pts_s)
