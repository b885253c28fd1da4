"""Long episodes read in pieces (issue 28): an episode's camera larger than `segment_bytes` is never fetched whole;
each sample's frames are cut from the file's index (the GOPs from the keyframe before them through the last
packet they need), decoded once, not cached. Every frame checked by painted ids, alone and in windows past both
ends, on torchcodec and on DALI's CPU decoder (VP9, one clip per sample and joined streams); the store holds only
table rows, and the bytes read are the pieces', not the episodes'."""

from __future__ import annotations

import pytest

from dali_stream import StreamLoader

from .test_boundaries import check_every_frame

CAMERAS = {"front": "h264", "top": "vp9"}


@pytest.fixture(scope="module")
def long_dataset(tmp_path_factory):
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=3, min_length=300, max_length=420, gop=30, episodes_per_file=2, seed=8,
                      cameras=parse_cameras(",".join(f"{k}:{v}" for k, v in CAMERAS.items())))
    return write_sample(tmp_path_factory.mktemp("long") / "long", spec)


@pytest.mark.parametrize("join_streams", [None, 0], ids=["joined", "per-sample"])
@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
def test_every_frame_read_in_pieces(long_dataset, windowed, join_streams):
    check_every_frame(long_dataset, 30, CAMERAS, decode="auto", windowed=windowed, segment_bytes=1,
                      join_streams=join_streams)


def test_pieces_are_read_instead_of_whole_episodes(long_dataset):
    with StreamLoader(str(long_dataset), batch_size=4, segment_bytes=1, device="cpu", num_workers=1,
                      image_dtype="uint8") as loader:
        it = iter(loader)
        for _ in range(3):
            next(it)
        stats = loader.store.stats
        built = stats.pieces_cut // (4 * len(CAMERAS))  # batches built so far (workers build ahead)
        assert stats.segments_cut == 0 and stats.pieces_cut == built * 4 * len(CAMERAS) and built >= 3, vars(stats)
        gops = sum(_gop_bytes(loader, loader.batch_plan(0, b)) for b in range(built))
        assert stats.piece_bytes <= 2 * gops, (stats.piece_bytes, gops)  # issue 28's bound: 2x the GOPs needed
        assert loader.store.bytes == sum(sum(v.nbytes for v in e.rows.values())
                                         for e in loader.store._entries.values() if e.done.is_set())
        assert loader.decoders.alive == 0  # a piece's decoder is not kept
    whole = StreamLoader(str(long_dataset), batch_size=4, device="cpu", num_workers=1, image_dtype="uint8")
    assert whole.segment_bytes_limit >= 16 << 20  # the default: these episodes are fetched whole
    with whole:
        next(iter(whole))
        assert whole.store.stats.pieces_cut == 0 and whole.store.stats.segments_cut > 0


def _gop_bytes(loader, plan) -> int:
    """Bytes of the whole GOPs holding each sample's frame, per camera, from each file's own index."""
    import numpy as np

    total = 0
    for key in loader.routes:
        cam = loader.meta.cameras[key]
        for pos, frame in zip(plan.episodes, plan.frames):
            index = loader.store.indexes.get(loader.meta.video_file(int(pos), key)).index
            t = (float(cam.from_timestamp[int(pos)]) + int(frame) / loader.meta.fps) * index.timescale
            keys = np.flatnonzero(index.sync)
            first = int(keys[keys <= np.flatnonzero(np.isclose(index.pts, t, atol=1))[0]][-1])
            later = keys[keys > first]
            stop = int(later[0]) if len(later) else len(index.sync)
            total += int(index.sizes[first:stop].sum())
    return total


def test_segment_bytes_is_checked():
    from dali_stream import ConfigError, LoaderConfig

    with pytest.raises(ConfigError, match=r"`segment_bytes` must be a positive integer \(bytes\). Found: 0"):
        LoaderConfig(segment_bytes=0)
