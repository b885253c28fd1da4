"""Long episodes read in pieces: an episode's camera larger than `segment_bytes` is never fetched whole;
each sample's frames are cut from the file's index (the GOPs from the keyframe before them through the last
packet they need), decoded once, not cached. Every frame checked by painted ids, alone and in windows past both
ends, on torchcodec and on DALI's CPU decoder (VP9, one clip per sample and joined streams); the store holds only
table rows, and the bytes read are the pieces', not the episodes'."""

from __future__ import annotations

import pytest

from dali_stream import StreamLoader
from dali_stream.tools.bench import gop_bytes_needed
from tests.loader.test_boundaries import check_every_frame

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
    check_every_frame(long_dataset, 30, CAMERAS, decode="dali-cpu", windowed=windowed, segment_bytes=1,
                      join_streams=join_streams)


def test_pieces_are_read_instead_of_whole_episodes(long_dataset):
    with StreamLoader(str(long_dataset), batch_size=4, segment_bytes=1, device="cpu", num_workers=1,
                      image_dtype="uint8") as loader:
        log = loader.record_pieces()
        it = iter(loader)
        for _ in range(3):
            next(it)
        bounded = loader.stats()["bounded"]
        # rows only: the three episodes' rows were fetched before the first batch
        held, rows = bounded["fetched_episodes"]["held"], bounded["fetched_episodes"]["row_bytes"]
        assert held == rows and bounded["cpu_decoders"]["idle"] == 0  # no segment cached, no piece's decoder kept
        loader.close()  # the workers and piece threads work ahead: stop them, some batches are half cut
        stats = loader.stats()["fetch"]
        assert stats["segments_cut"] == 0 and stats["pieces_cut"] >= 3 * 4 * len(CAMERAS), stats
        assert len(log) == stats["pieces_cut"]
        gops = gop_bytes_needed(loader, log)
        assert stats["piece_bytes"] <= 2 * gops, (stats["piece_bytes"], gops)  # the bound: 2x the GOPs needed
    whole = StreamLoader(str(long_dataset), batch_size=4, device="cpu", num_workers=1, image_dtype="uint8")
    assert whole.resolved.segment_bytes >= 16 << 20  # the default: these episodes are fetched whole
    with whole:
        next(iter(whole))
        assert whole.stats()["fetch"]["pieces_cut"] == 0 and whole.stats()["fetch"]["segments_cut"] > 0


def test_segment_bytes_is_checked():
    from dali_stream import ConfigError, LoaderConfig

    with pytest.raises(ConfigError, match=r"`segment_bytes` must be a positive integer \(bytes\). Found: 0"):
        LoaderConfig(segment_bytes=0)


def test_pieces_are_cut_ahead_and_none_outlive_the_epoch(long_dataset):
    """The piece threads cut the batches' pieces before the builders ask (`EpisodeStore.cut_ahead`); the
    builders take them; an epoch stopped early drops those nobody will take, and its loader holds none after."""
    with StreamLoader(str(long_dataset), batch_size=4, segment_bytes=1, device="cpu", num_workers=1,
                      fetch_workers=2, image_dtype="uint8") as loader:
        it = iter(loader)
        for _ in range(6):
            next(it)
        stats = loader.stats()["fetch"]
        assert stats["pieces_ahead"] > 0 and stats["pieces_ahead_peak"] > 0, stats
        it.close()  # the epoch stops with batches built and cut ahead
        stats, ahead = loader.stats()["fetch"], loader.stats()["bounded"]["pieces_ahead"]
        assert ahead["pieces"] == 0 and ahead["held"] == 0
        taken = 6 * 4 * len(CAMERAS)  # the pieces of the batches handed over, at least
        assert stats["pieces_cut"] >= taken and stats["pieces_cut"] - stats["pieces_dropped"] >= taken, stats
    with StreamLoader(str(long_dataset), batch_size=4, segment_bytes=1, device="cpu", num_workers=1,
                      fetch_workers=0, image_dtype="uint8") as alone:
        next(iter(alone))
        stats = alone.stats()["fetch"]
        assert stats["pieces_cut"] > 0 and stats["pieces_ahead"] == 0  # no threads: builders cut


def test_pieces_over_http_are_cut_in_parallel(long_dataset):
    """Over a far-away store (loopback server behind 50 ms of latency a request) the piece threads read the
    pieces of the batches ahead (more of them than the builders work ahead) while earlier ones build: the same
    samples as read from disk, and the builders take their pieces rather than cutting them one request at a time."""
    from tests.support.faultproxy import FaultProxy
    from tests.support.httpserver import Server

    settings = dict(batch_size=4, segment_bytes=1, device="cpu", num_workers=1, fetch_workers=4,
                    image_dtype="uint8", seed=3)
    with StreamLoader(str(long_dataset), **settings) as local:
        want = [b["observation.images.front"].numpy() for _, b in zip(range(4), local)]
    with Server(long_dataset) as upstream, FaultProxy(upstream, delay_s=0.05) as url:
        with StreamLoader(url, **settings) as remote:
            batches = iter(remote)
            got = [next(batches)["observation.images.front"].numpy() for _ in range(4)]
            now = remote.stats()
            stats = now["fetch"]
            taken = 4 * 4 * len(CAMERAS)  # the pieces of the four batches handed over
            assert stats["pieces_ahead"] >= taken // 2, stats
            # and the pieces of batches further ahead than the builders work are asked for already (taken ones are
            # gone), their reads in flight
            ahead = now["bounded"]["pieces_ahead"]["furthest_batch"]
            assert ahead is not None, now["bounded"]["pieces_ahead"]
            assert ahead >= 3 + remote.resolved.cut_ahead > 3 + remote.resolved.prefetch_batches, (ahead, remote.resolved.cut_ahead)
            batches.close()
    assert all((a == b).all() for a, b in zip(want, got))


def test_resume_mid_epoch_reads_the_same_pieces(long_dataset):
    """A loader resumed mid-epoch (`load_state_dict`) cuts the pieces of the batches from there on, ahead of its
    builders as from the start: the same batches, pixel for pixel, as the uninterrupted epoch."""
    settings = dict(batch_size=4, segment_bytes=1, device="cpu", num_workers=2, image_dtype="uint8", seed=5,
                    delta_timestamps={"observation.images.front": [-0.1, 0.0]})

    def batches(loader, n):
        return [{k: b[k].numpy() for k in ("index", "observation.images.front", "observation.images.top")}
                for _, b in zip(range(n), loader)]

    with StreamLoader(str(long_dataset), **settings) as whole_run:
        want = batches(whole_run, 7)
    with StreamLoader(str(long_dataset), **settings) as first:
        batches(first, 4)
        state = first.state_dict()
    with StreamLoader(str(long_dataset), **settings) as resumed:
        resumed.load_state_dict(state)
        got = batches(resumed, 3)
        assert resumed.stats()["fetch"]["pieces_cut"] > 0
    for a, b in zip(want[4:], got):
        assert all((a[k] == b[k]).all() for k in a)


def test_a_batchs_pieces_share_one_decoder_per_camera(long_dataset):
    """torchcodec decodes a batch's pieces of a camera as one joined stream (`graph.joined.join_pieces`): one
    decoder opened per batch and camera, not one per sample (every frame right: the tests above)."""
    with StreamLoader(str(long_dataset), batch_size=4, segment_bytes=1, device="cpu", decode="cpu", num_workers=1,
                      image_dtype="uint8") as loader:
        for _, _batch in zip(range(5), loader):
            pass
        assert loader.stats()["fetch"]["pieces_cut"] >= 5 * 4 * len(CAMERAS)
        opened = loader.stats()["decoders"]["opened"]
        assert opened <= (5 + loader.resolved.prefetch_batches) * len(CAMERAS), opened


def test_a_damaged_piece_is_named_after_its_joined_stream_fails(long_dataset, tmp_path):
    """A file whose keyframes are garbage: the joined stream holding its piece fails, the pieces are decoded one
    by one (said once), and the damaged one's error names its episode and camera."""
    import re
    import shutil
    import warnings
    from pathlib import Path

    from dali_stream import DecodeError
    from dali_stream.meta.dataset import DatasetMeta
    from tests.support.damage import scramble_keyframes

    copy = tmp_path / "copy"
    shutil.copytree(long_dataset, copy)
    meta = DatasetMeta.open(str(copy))
    top = "observation.images.top"
    files: dict[str, list[int]] = {}
    for pos in range(len(meta.lengths)):
        files.setdefault(meta.video_file(pos, top), []).append(meta.episode_index(pos))
    damaged, (alone,) = next((f, eps) for f, eps in files.items() if len(eps) == 1)  # a file of one episode
    scramble_keyframes(Path(damaged))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(DecodeError, match=rf"torchcodec could not decode episode {alone}, camera '{top}' "
                                              rf"\(vp9, \d+ bytes cut from {re.escape(damaged)}\).*re-download the file"):
            with StreamLoader(str(copy), batch_size=4, segment_bytes=1, device="cpu", decode="cpu",
                              num_workers=0, image_dtype="uint8") as loader:
                for _ in loader:
                    pass
    joined = [w for w in said if "joined into one stream did not decode" in str(w.message)]
    assert len(joined) == 1 and "camera 'observation.images.top'" in str(joined[0].message)
