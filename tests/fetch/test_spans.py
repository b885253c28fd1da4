"""Byte spans read together (`fetch.spans`): spans of a file that overlap or lie within the gap are one read; a
remote store gets a batch's reads at once (every first attempt in flight together), faults cost retries and never
bytes; and a batch's pieces of long episodes are read this way, fewer reads than pieces where they lie close."""

from __future__ import annotations

import contextlib
import random
import threading

import numpy as np
import pytest

from dali_stream import StreamLoader
from dali_stream.fetch.spans import coalesce, read_spans
from dali_stream.fetch.store import EpisodeStore
from dali_stream.source.storage import LocalRanges, RemoteOptions, open_fs
from tests.support.faultproxy import FaultProxy
from tests.support.httpserver import Server
from tests.support.parts import built, store_for


def test_coalesce_joins_overlapping_and_near_spans_of_one_file():
    spans = [("b", 0, 10), ("a", 500, 600), ("a", 0, 100), ("a", 50, 80), ("a", 130, 200), ("b", 10, 20)]
    assert coalesce(spans, max_gap=30) == [("a", 0, 200, [2, 3, 4]), ("a", 500, 600, [1]), ("b", 0, 20, [0, 5])]
    assert coalesce(spans, max_gap=0) == [("a", 0, 100, [2, 3]), ("a", 130, 200, [4]), ("a", 500, 600, [1]),
                                          ("b", 0, 20, [0, 5])]  # adjacent (b: 10 = 10) still one read
    assert coalesce([]) == []


def _video_spans(root, n: int, seed: int) -> list[tuple[str, int, int]]:
    """`n` random spans of the dataset's video files (relative paths), some overlapping."""
    rng = random.Random(seed)
    files = sorted(p for p in root.rglob("*.mp4"))
    out = []
    for _ in range(n):
        path = rng.choice(files)
        size = path.stat().st_size
        start = rng.randrange(0, size - 1)
        out.append((str(path.relative_to(root)), start, min(size, start + rng.randrange(1, 3000))))
    return out


class Counting:
    """A store's range reader that counts what it is asked (the reads go to the real one)."""

    def __init__(self, ranges) -> None:
        self.ranges, self.calls, self.reads = ranges, 0, 0

    def read_range(self, path, start, end):
        self.calls, self.reads = self.calls + 1, self.reads + 1
        return self.ranges.read_range(path, start, end)

    def read_ranges(self, spans):
        self.calls, self.reads = self.calls + 1, self.reads + len(spans)
        return self.ranges.read_ranges(spans)

    def __getattr__(self, name):
        return getattr(self.ranges, name)


def test_read_spans_serve_every_span_from_its_read(small_dataset):
    spans = _video_spans(small_dataset, 60, seed=1)
    local = Counting(LocalRanges(open_fs(str(small_dataset))[0]))
    got = read_spans(local, [(str(small_dataset / p), s, e) for p, s, e in spans])
    for (path, start, end), (at, data) in zip(spans, got):
        assert data[start - at:end - at] == (small_dataset / path).read_bytes()[start:end]
    assert local.calls == 1 and local.reads < len(spans)  # one call; the small files' spans share reads


def test_remote_reads_go_out_together_and_faults_cost_retries_not_bytes(small_dataset):
    """Every first attempt of a batch's reads is in flight at once (the proxy answers each after 0.2 s, so
    one after another would have one in flight); ~20 % of them fail (503, reset, truncated body) and are read
    again, every span's bytes right."""
    spans = _video_spans(small_dataset, 24, seed=2)
    with Server(small_dataset) as upstream:
        proxy = FaultProxy(upstream, fault_rate=0.2, seed=7, delay_s=0.2)
        with proxy as url:
            fs, _ = open_fs(url, RemoteOptions(max_retries=8))
            got = fs.read_ranges([(f"{url}/{p}", s, e) for p, s, e in spans])
    for (path, start, end), data in zip(spans, got):
        assert data == (small_dataset / path).read_bytes()[start:end]
    assert proxy.counts["faults"] > 0 and fs.stats.retries > 0, (proxy.counts, fs.stats)
    assert proxy.counts["in_flight_peak"] >= len(spans) // 2, proxy.counts
    assert fs.stats.bytes == sum(e - s for _, s, e in spans)


def test_a_failed_remote_span_is_named_after_its_retries(small_dataset):
    """A span whose file keeps failing ends in the retries' RemoteError naming the URL, not in wrong bytes."""
    from dali_stream import RemoteError

    spans = _video_spans(small_dataset, 4, seed=3)
    with Server(small_dataset) as upstream, FaultProxy(upstream, fail_paths=r"\.mp4") as url:
        fs, _ = open_fs(url, RemoteOptions(max_retries=1))
        with pytest.raises(RemoteError, match=r"reading bytes \d+-\d+ of http://127\.0\.0\.1:\d+/videos/.*\.mp4 failed 2 times .*retry policy: remote_max_retries=1"):
            fs.read_ranges([(f"{url}/{p}", s, e) for p, s, e in spans])


@pytest.fixture(scope="module")
def long_dataset(tmp_path_factory):
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=2, min_length=240, max_length=240, gop=2, seed=4, cameras=parse_cameras("front:h264"))
    return write_sample(tmp_path_factory.mktemp("spans") / "long", spec)


def test_a_batchs_pieces_are_read_in_fewer_reads_than_pieces(long_dataset):
    """Samples of a batch drawn from two long episodes, read in pieces (`segment_bytes=1`): their pieces lie a
    few GOPs apart in one file, so the batch's reads cover several pieces each; every frame is still right (the
    batches' painted ids)."""
    from dali_stream.tools.paint import read_ids

    with built(EpisodeStore) as stores:  # the loader's store, whose reads are counted
        loader = StreamLoader(str(long_dataset), batch_size=16, episode_pool_size=2, segment_bytes=1, device="cpu",
                              num_workers=1, image_dtype="uint8", seed=2)
    with loader:
        (store,) = stores
        counting = store.files[0].ranges = Counting(store.files[0].ranges)
        for _, batch in zip(range(6), loader):
            for image, ep, fr in zip(batch["observation.images.front"], batch["episode_index"], batch["frame_index"]):
                assert read_ids(image.numpy()) == (int(ep), int(fr))
        stats = loader.stats()["fetch"]
        pieces = stats["pieces_cut"]
        assert pieces >= 6 * 16 and stats["pieces_ahead"] > 0, stats
        assert counting.reads < pieces / 2, (counting.reads, pieces)


def test_a_piece_written_alone_is_the_mp4_of_its_samples(long_dataset):
    """A piece is kept as its samples (`body`) until a decoder opens it alone: then its MP4 holds exactly those
    packets (read back from the MP4 itself) and decodes to the frames asked for."""
    from dali_stream.decode.cpu import torchcodec_frames
    from dali_stream.fetch.segments import packet_index
    from dali_stream.fetch.tables import FRAME_TIME_S
    from dali_stream.tools.paint import read_ids

    key = "observation.images.front"
    with StreamLoader(str(long_dataset), batch_size=2, segment_bytes=1, device="cpu", num_workers=0) as loader, \
            contextlib.closing(store_for(loader)) as store:  # a store as the loader's: episodes read in pieces
        cam = loader.meta.cameras[key]
        rows = store.rows(1)
        frames = np.array([101, 102, 103])
        query = float(cam.from_timestamp[1]) + rows[FRAME_TIME_S][frames]
        piece = store.segment_for(1, key, query)
        assert piece.piece and "data" not in vars(piece)  # not written yet
        index, written = piece.packets(), packet_index(piece.data)
        assert len(piece.data) > len(piece.body)
        for name in ("size", "pts", "dts", "duration", "key"):
            assert np.array_equal(getattr(index, name), getattr(written, name)), name
        for k in range(len(index.pos)):
            assert piece.data[written.pos[k]:written.pos[k] + written.size[k]] == \
                piece.body[index.pos[k]:index.pos[k] + index.size[k]]
        idx = piece.frame_indices(query, loader.config.tolerance_s, "test")
        episode = int(loader.meta.episodes["episode_index"][1])
        assert [read_ids(f) for f in torchcodec_frames(piece, idx)] == [(episode, int(f)) for f in frames]


def test_a_builder_runs_its_batchs_piece_task_when_no_piece_thread_has_begun_it(long_dataset):
    """Every piece thread busy (held here on an event), each builder finds its batch's task not begun and runs it
    itself: the batch's pieces still come from coalesced reads, not one read a sample, and every frame is right."""
    from dali_stream.tools.paint import read_ids

    with built(EpisodeStore) as stores:  # the loader's store: its piece threads held busy, its reads counted
        loader = StreamLoader(str(long_dataset), batch_size=16, episode_pool_size=2, segment_bytes=1, device="cpu",
                              num_workers=1, image_dtype="uint8", seed=2)
    with loader:
        (store,) = stores
        counting = store.files[0].ranges = Counting(store.files[0].ranges)
        release = threading.Event()
        pool = store.pieces._pool
        held = [pool.submit(release.wait) for _ in range(pool._max_workers)]
        try:
            for _, batch in zip(range(4), loader):
                for image, ep, fr in zip(batch["observation.images.front"], batch["episode_index"],
                                         batch["frame_index"]):
                    assert read_ids(image.numpy()) == (int(ep), int(fr))
            stats = loader.stats()["fetch"]
            assert stats["batches_taken_over"] >= 4 and stats["pieces_ahead"] >= 4 * 16, stats
            assert counting.reads < stats["pieces_cut"] / 2, (counting.reads, stats["pieces_cut"])
        finally:
            release.set()
            for h in held:
                h.result()
