"""Long episodes read in pieces (issue 28): an episode's camera larger than `segment_bytes` is never fetched whole;
each sample's frames are cut from the file's index (the GOPs from the keyframe before them through the last
packet they need), decoded once, not cached. Every frame checked by painted ids, alone and in windows past both
ends, on torchcodec and on DALI's CPU decoder (VP9, one clip per sample and joined streams); the store holds only
table rows, and the bytes read are the pieces', not the episodes'."""

from __future__ import annotations

import pytest

from dali_stream import StreamLoader
from dali_stream.tools.bench import gop_bytes_needed

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
        held = loader.store.bytes  # rows only: the three episodes' rows were fetched before the first batch
        rows = sum(sum(v.nbytes for v in e.rows.values()) for e in loader.store._entries.values() if e.done.is_set())
        assert held == rows and not loader.decoders._idle  # no segment cached, no piece's decoder kept
        loader.close()  # the workers build ahead: stop them, the last batch may be half built
        built = -(-stats.pieces_cut // (4 * len(CAMERAS)))  # batches begun
        assert stats.segments_cut == 0 and stats.pieces_cut >= 3 * 4 * len(CAMERAS), vars(stats)
        gops = gop_bytes_needed(loader, [loader.batch_plan(0, b) for b in range(built)])
        assert stats.piece_bytes <= 2 * gops, (stats.piece_bytes, gops)  # issue 28's bound: 2x the GOPs needed
    whole = StreamLoader(str(long_dataset), batch_size=4, device="cpu", num_workers=1, image_dtype="uint8")
    assert whole.segment_bytes_limit >= 16 << 20  # the default: these episodes are fetched whole
    with whole:
        next(iter(whole))
        assert whole.store.stats.pieces_cut == 0 and whole.store.stats.segments_cut > 0


def test_segment_bytes_is_checked():
    from dali_stream import ConfigError, LoaderConfig

    with pytest.raises(ConfigError, match=r"`segment_bytes` must be a positive integer \(bytes\). Found: 0"):
        LoaderConfig(segment_bytes=0)
