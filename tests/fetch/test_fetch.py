"""Fetching for remote sources: the MP4 index agrees with FFmpeg's demuxer packet for packet, the indexed
cut equals the demuxing cut, only the admitted episodes' bytes cross the network (one epoch, pool smaller
than the dataset), episodes are prefetched when admitted, a resumed run fetches nothing for what it
skipped, and the cache is bounded in bytes. Real HTTP server on loopback, real parquet and MP4 files."""

from __future__ import annotations

import io
import shutil

import numpy as np
import pytest
import torch

from dali_stream import StreamLoader
from dali_stream.fetch.indexes import IndexCache
from dali_stream.fetch.mp4index import Mp4Index, read_index
from dali_stream.fetch.segments import cut_segment
from dali_stream.meta.dataset import DatasetMeta
from dali_stream.source.remote import RemoteFS, RetryPolicy
from dali_stream.source.storage import LocalRanges
from tests.support.httpserver import Server

ARGS = dict(batch_size=4, episode_pool_size=2, seed=1, device="cpu", num_workers=2, drop_last=False)


@pytest.fixture(scope="module")
def bulky_dataset(tmp_path_factory):
    """Larger frames and longer episodes than the other fixtures, six episodes per packed file, so the
    per-file costs (MP4 index, parquet footer) are small next to the episodes, as in real datasets."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=12, min_length=40, max_length=60, gop=15, episodes_per_file=6, height=144,
                      width=192, cameras=parse_cameras("front:h264,top:vp9"), seed=5)
    return write_sample(tmp_path_factory.mktemp("ds") / "bulky", spec)


def _local_rfs() -> RemoteFS:
    from fsspec.implementations.local import LocalFileSystem

    return RemoteFS(LocalFileSystem(), RetryPolicy())


def _packets(data_or_path) -> list[tuple]:
    """(pts, dts, duration) in seconds (exact fractions: the remux of PyAV 15 writes another time base than
    PyAV 18's), the bytes and the keyframe flag of each packet."""
    import av

    src = io.BytesIO(data_or_path) if isinstance(data_or_path, bytes) else str(data_or_path)
    with av.open(src) as c:
        stream = c.streams.video[0]
        tb = stream.time_base
        return [(p.pts * tb, p.dts * tb, p.duration * tb, bytes(p), p.is_keyframe) for p in c.demux(stream) if p.size]


def _relative(packets: list[tuple]) -> list[tuple]:
    """Packets with pts and dts counted from the first packet's dts."""
    base = packets[0][1]
    return [(pts - base, dts - base, *rest) for pts, dts, *rest in packets]


def _cut_args(meta, pos, key):
    cam = meta.cameras[key]
    start = float(cam.from_timestamp[pos])
    return (meta.video_file(pos, key), start, float(cam.to_timestamp[pos])), dict(
        episode=pos, camera=key, codec=cam.codec, tolerance_s=1e-4,
        last_frame_s=start + (int(meta.lengths[pos]) - 1) / meta.fps)


def test_index_matches_the_demuxer(four_codec_dataset):
    """Every sample's offset, size, pts, dts, duration and keyframe flag as FFmpeg's mov demuxer reports them
    (H.264 with B-frames and an edit list, HEVC, AV1, VP9)."""
    import av

    files = sorted(four_codec_dataset.glob("videos/*/*/*.mp4"))
    assert len(files) >= 8
    for path in files:
        rfs = _local_rfs()
        index = read_index(rfs, str(path))
        assert rfs.stats.requests <= 6  # size, the first 4 KB, a few box headers, moov: never the media data
        with av.open(str(path)) as c:
            stream = c.streams.video[0]
            want = [(p.pos, p.size, p.pts, p.dts, p.duration, p.is_keyframe) for p in c.demux(stream) if p.size]
        got = list(zip(index.offsets.tolist(), index.sizes.tolist(), index.pts.tolist(), index.dts.tolist(),
                       index.durations.tolist(), index.sync.tolist()))
        assert got == want, path


def test_cut_searches_find_what_a_scan_finds(four_codec_dataset):
    """`Mp4Index.cut` binary-searches (a piece of an hour-long file costs what one of a minute does): for every
    codec's files and times all along them, at and between frames, the samples a scan by its definition finds
    (the last keyframe shown at or before the start, through the sample before the first dts at the end); and a
    file whose keyframes' times go back (no real encoder's) is scanned."""
    rng = np.random.default_rng(0)
    for path in sorted(four_codec_dataset.glob("videos/*/*/*.mp4")):
        index = read_index(_local_rfs(), str(path))
        assert index.keys_ordered and index.dts_rise, path  # real files take the searches
        ts = index.timescale
        shown = np.sort(index.pts) / ts
        starts = np.concatenate([shown, shown + 0.4 / 30, rng.uniform(-0.1, shown[-1] + 0.1, 50)])
        for from_s in starts:
            to_s = from_s + rng.uniform(0, 2)
            keys = np.flatnonzero(index.sync & (index.pts <= (from_s + 1e-6) * ts))
            want = None
            if len(keys):
                later = np.flatnonzero(index.dts[keys[-1] + 1:] >= (to_s - 1e-6) * ts)
                want = (int(keys[-1]), int(keys[-1]) + 1 + int(later[0]) if len(later) else len(index.dts))
            assert index.cut(from_s, to_s) == want, (path, from_s, to_s)
        shuffled = Mp4Index.of(index.size, index.pieces, ts, index.offsets, index.sizes, index.dts,
                               index.pts[::-1].copy(), index.durations, index.sync, index.stsd)
        assert not shuffled.keys_ordered
        keys = np.flatnonzero(shuffled.sync & (shuffled.pts <= shown[len(shown) // 2] * ts + 1))
        assert shuffled.cut(shown[len(shown) // 2], shown[-1] + 1)[0] == keys[-1]


def test_index_matches_pyav_index_entries(four_codec_dataset):
    """The library alternative (docs/architecture.md, "Our code or a library's"): PyAV's index entries hold the same offsets,
    sizes, dts and keyframe flags for every sample of every codec's files; they have no pts."""
    import av

    if not hasattr(av.video.stream.VideoStream, "index_entries"):
        pytest.skip(f"PyAV {av.__version__} has no index entries to compare with")
    for path in sorted(four_codec_dataset.glob("videos/*/*/*.mp4")):
        index = read_index(_local_rfs(), str(path))
        with av.open(str(path)) as c:
            entries = c.streams.video[0].index_entries
            theirs = [(e.pos, e.size, e.timestamp, e.is_keyframe) for e in entries]
        ours = list(zip(index.offsets.tolist(), index.sizes.tolist(), index.dts.tolist(), index.sync.tolist()))
        assert ours == theirs, path


def test_local_files_are_cut_from_their_index(four_codec_dataset):
    """Local data takes the indexed cut too (one read of an episode's packets, no demuxer per episode), and its
    batches are the painted frames the plan asked for."""
    from dali_stream.tools.paint import read_ids

    loader = StreamLoader(str(four_codec_dataset), batch_size=4, episode_pool_size=2, device="cpu",
                          image_dtype="uint8", decode="cpu")
    batch = next(iter(loader))
    meta = loader.meta
    indexes = IndexCache(LocalRanges(meta.data_fs))
    for key in meta.video_keys:
        path = meta.video_file(int(batch["episode_index"][0]), key)
        assert indexes.get(path) is not None, indexes.unsupported
        for i in range(4):
            assert read_ids(batch[key][i]) == (int(batch["episode_index"][i]), int(batch["frame_index"][i]))
    assert loader.stats()["fetch"]["unindexed"] == {}  # the loader cut them through their indexes too
    loader.close()


def test_indexed_cut_equals_the_demuxing_cut(four_codec_dataset):
    from fsspec.implementations.local import LocalFileSystem

    meta = DatasetMeta.open(str(four_codec_dataset))
    rfs = _local_rfs()
    cache = IndexCache(rfs)
    for key in meta.cameras:
        for pos in range(meta.num_episodes):
            args, kw = _cut_args(meta, pos, key)
            demuxed = cut_segment(LocalFileSystem(), *args, **kw)
            indexed = cut_segment(rfs, *args, indexed=cache.get(args[0]), **kw)
            assert np.array_equal(demuxed.pts_s, indexed.pts_s), (key, pos)
            # the same packets, bytes and flags, with the same spacing and order of pts and dts (the indexed
            # segment is written by mp4write with its first dts at 0, the remuxed one keeps the source's)
            assert _relative(_packets(demuxed.data)) == _relative(_packets(indexed.data)), (key, pos)
    assert cache.unsupported == {}


def test_fragmented_mp4_is_cut_without_the_index(small_dataset, tmp_path):
    """A layout the index does not handle (fragmented MP4) is read through plain range requests: same batches."""
    import av

    ds = tmp_path / "fragmented"
    shutil.copytree(small_dataset, ds)
    files = sorted(ds.glob("videos/observation.images.top/*/*.mp4"))  # VP9: no B-frames, no edit list needed
    for path in files:
        tmp = path.with_suffix(".tmp.mp4")
        with av.open(str(path)) as src, av.open(str(tmp), "w", format="mp4",
                                               options={"movflags": "frag_keyframe+empty_moov"}) as dst:
            out = dst.add_stream_from_template(src.streams.video[0])
            for pkt in src.demux(src.streams.video[0]):
                if pkt.size:
                    pkt.stream = out
                    dst.mux(pkt)
        tmp.replace(path)
    local = [b for b in StreamLoader(str(ds), **ARGS)]
    with Server(ds) as url:
        loader = StreamLoader(url, **ARGS)
        remote = [b for b in loader]
    assert len(local) == len(remote) > 0
    for a, b in zip(local, remote):
        for k in a:
            assert a[k] == b[k] if k == "task" else torch.equal(a[k], b[k]), k
    unsupported = loader.stats()["fetch"]["unindexed"]
    assert {p.rsplit("/", 1)[-1] for p in unsupported} == {p.name for p in files}
    assert all("fragmented" in why for why in unsupported.values())


def _episode_bytes(meta, positions) -> int:
    """What the episodes need, measured on the local files: the packets of each camera's segment (cut by
    the demuxer, keyframe pre-roll included) and the compressed column chunks of its parquet row groups."""
    import pyarrow.parquet as pq
    from fsspec.implementations.local import LocalFileSystem

    total = 0
    for pos in positions:
        for key in meta.cameras:
            args, kw = _cut_args(meta, pos, key)
            total += sum(len(p[3]) for p in _packets(cut_segment(LocalFileSystem(), *args, **kw).data))
        md = pq.ParquetFile(meta.data_file(pos)).metadata
        lo, hi = int(meta.episodes["dataset_from_index"][pos]), int(meta.episodes["dataset_to_index"][pos])
        index_col = md.schema.to_arrow_schema().names.index("index")
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(index_col).statistics
            if st.min < hi and st.max >= lo:
                total += sum(md.row_group(g).column(c).total_compressed_size for c in range(md.num_columns))
    return total


def _fetched_during(loader, server, run) -> tuple[object, int, int]:
    ours, theirs = loader.remote_stats["bytes"], server.counts["bytes"]
    out = run()
    return out, loader.remote_stats["bytes"] - ours, server.counts["bytes"] - theirs


def test_one_epoch_fetches_only_the_episodes_it_reads(bulky_dataset):
    """Rank 0 of 2, pool 2 of 12 episodes: the bytes that cross the network in its epoch are at most 1.2x
    the bytes of the episodes it reads; each episode is fetched once, and no other episode is."""
    meta = DatasetMeta.open(str(bulky_dataset))
    server = Server(bulky_dataset)
    with server as url:
        loader = StreamLoader(url, rank=0, world_size=2, **ARGS)
        batches, ours, theirs = _fetched_during(loader, server, lambda: [b for b in loader])
    plan = loader.epoch_plan(0)
    drawn = {int(p) for i in range(plan.num_batches) for p in plan.batch(i).episodes}
    assert loader.fetched_episodes() == drawn == set(plan.admission_order.tolist())
    assert len(drawn) < meta.num_episodes
    assert loader.stats()["fetch"]["segments_cut"] == len(drawn) * len(meta.cameras)
    needed = _episode_bytes(meta, drawn)
    assert ours == theirs, "our byte counter disagrees with the server's"
    assert needed <= theirs <= 1.2 * needed, (theirs, needed, theirs / needed)
    assert len(batches) == plan.num_batches


def test_episodes_are_prefetched_when_admitted(bulky_dataset):
    """Builders find every episode fetched or in flight (the plan's admissions are pinned ahead); with
    fetch_workers=0 they fetch on demand instead, with the same batches."""
    with Server(bulky_dataset) as url:
        ahead = StreamLoader(url, fetch_workers=3, **ARGS)
        a = [b for b in ahead]
        on_demand = StreamLoader(url, fetch_workers=0, **ARGS)
        b = [b for b in on_demand]
    n = len(ahead.fetched_episodes())
    fetched, on_demand_fetched = ahead.stats()["fetch"], on_demand.stats()["fetch"]
    assert fetched["demand_fetches"] == 0 and fetched["prefetches"] == n
    assert on_demand_fetched["demand_fetches"] == n and on_demand_fetched["prefetches"] == 0
    assert len(a) == len(b) and all(torch.equal(x["index"], y["index"]) for x, y in zip(a, b))


def test_remote_resume_fetches_nothing_for_skipped_episodes(bulky_dataset):
    meta = DatasetMeta.open(str(bulky_dataset))
    server = Server(bulky_dataset)
    with server as url:
        first = StreamLoader(url, **ARGS)
        k = len(first) // 2
        for i, _ in enumerate(first):
            if i + 1 == k:
                break
        state = first.state_dict()
        first.close()  # its run-ahead would go on fetching while the second loader's bytes are counted
        second = StreamLoader(url, **ARGS)
        second.load_state_dict(state)
        rest, ours, theirs = _fetched_during(second, server, lambda: [b for b in second])
    plan = second.epoch_plan(0)
    assert len(rest) == plan.num_batches - k
    finished = {p for i in range(k) for p in plan.batch(i).retired}  # every frame drawn before the resume
    drawn_after = {int(p) for i in range(k, plan.num_batches) for p in plan.batch(i).episodes}
    fetched = second.fetched_episodes()
    assert finished and not fetched & finished
    assert fetched == drawn_after | set(plan.pool_before(k))
    assert theirs <= 1.2 * _episode_bytes(meta, fetched)


def test_cache_is_bounded_in_bytes_and_refcounted(small_dataset):
    """A cache smaller than the pool's working set warns and still gives the same batches; at the end of an
    epoch every pin is released and the store is back under its bound (its retired episodes dropped: the epoch
    does not fit). A large cache serves the next epoch
    without fetching anything."""
    big = StreamLoader(str(small_dataset), **ARGS)
    want = [b["index"] for b in big]
    stats = big.stats()
    assert stats["fetch"]["evictions"] == 0
    entries = stats["bounded"]["fetched_episodes"]
    assert entries["episodes"] > 0 and entries["pinned"] == 0
    assert stats["decoders"]["opened"] > 0 and stats["bounded"]["cpu_decoders"]["held"] == 0, "retired decoders kept"
    fetched = stats["fetch"]["segments_cut"]
    again = [b for b in big]
    assert len(again) == len(want) and big.stats()["fetch"]["segments_cut"] == fetched  # all cached
    tiny = StreamLoader(str(small_dataset), cache_bytes=1, **ARGS)
    with pytest.warns(UserWarning, match="raise cache_bytes or lower episode_pool_size"):
        got = [b["index"] for b in tiny]
    assert all(torch.equal(x, y) for x, y in zip(got, want)) and len(got) == len(want)
    stats = tiny.stats()
    assert stats["fetch"]["retired_dropped"] > 0  # the epoch does not fit: each episode dropped once retired
    entries = stats["bounded"]["fetched_episodes"]
    assert entries["held"] <= 1 and entries["pinned"] == 0


def test_cache_settings_are_checked(small_dataset):
    from dali_stream import ConfigError

    with pytest.raises(ConfigError, match="`cache_bytes` must be a positive integer"):
        StreamLoader(str(small_dataset), cache_bytes=0, **ARGS)
    with pytest.raises(ConfigError, match="`fetch_workers` must be an integer >= 0"):
        StreamLoader(str(small_dataset), fetch_workers=-1, **ARGS)


def test_the_compact_index_gives_every_span_exactly(four_codec_dataset):
    """Any run of samples' arrays from the compact index equal the per-sample arrays it was made from (the
    track's tables as `track_of` parses them), for every codec's files, and for a track whose decode steps vary,
    whose samples are scattered over the file and whose presentation offsets need 32 bits; a lerobot-written file
    costs at most 10 bytes a frame."""
    from dali_stream.fetch.mp4index import track_of

    rng = np.random.default_rng(1)

    def check(index, arrays):
        offsets, sizes, dts, pts, durations, sync = arrays
        n = len(sizes)
        for first, stop in [(0, n), (n - 1, n), *(sorted(rng.integers(0, n + 1, 2)) for _ in range(30))]:
            got = index.span(first, stop)
            for name, want in zip(("offsets", "sizes", "dts", "pts", "durations", "sync"), arrays):
                assert np.array_equal(getattr(got, name), want[first:stop]), (name, first, stop)
        assert all(index.pts_at(i) == pts[i] for i in range(0, n, max(1, n // 7)))

    for path in sorted(four_codec_dataset.glob("videos/*/*/*.mp4")):
        ts, *arrays, stsd = track_of(path.read_bytes())
        index = read_index(_local_rfs(), str(path))
        check(index, arrays)
        assert index.nbytes / len(arrays[1]) <= 10, (path, index.nbytes / len(arrays[1]))
        offsets, sizes, dts, pts, durations, sync = arrays
        for shown in rng.choice(len(pts), 5):  # the GOP of a shown frame, as a scan of every sample finds it
            keys = np.flatnonzero(sync)
            first = int(keys[keys <= shown][-1])
            later = keys[keys > first]
            want = int(sizes[first:int(later[0]) if len(later) else len(sync)].sum())
            assert index.gop_bytes(pts[shown] / ts) == want, (path, shown)
    n = 1000
    sizes = rng.integers(1, 5000, n)
    offsets = np.cumsum(np.concatenate([[48], sizes[:-1]])) + np.repeat(np.arange(0, n, 37), 37)[:n] * 9
    steps = rng.integers(400, 600, n)
    dts = np.concatenate([[-1024], -1024 + np.cumsum(steps[:-1])])
    pts = dts + rng.integers(-2**20, 2**20, n)
    sync = rng.random(n) < 0.1
    sync[0] = True
    odd = Mp4Index.of(1 << 40, (), 15360, offsets, sizes, dts, pts, steps, sync, b"")
    assert odd.dts_step == 0 and odd.comp.dtype == np.int32 and len(odd.run_first) > n // 37
    assert odd.durations_all is None  # the durations are the decode steps: not kept twice
    near = dts + rng.integers(0, 300, n)  # presentation offsets below the smallest step: keyframes in order
    for shown in (pts, near):
        index = Mp4Index.of(1 << 40, (), 15360, offsets, sizes, dts, shown, steps, sync, b"")
        assert index.keys_ordered == (shown is near)  # binary searches, and the scan where pts go back
        for from_s in rng.uniform(-0.1, dts[-1] / 15360 + 0.1, 40):
            to_s = from_s + rng.uniform(0, 1)
            keys = np.flatnonzero(sync & (shown <= (from_s + 1e-6) * 15360))
            want = None
            if len(keys):
                later = np.flatnonzero(dts[keys[-1] + 1:] >= (to_s - 1e-6) * 15360)
                want = (int(keys[-1]), int(keys[-1]) + 1 + int(later[0]) if len(later) else n)
            assert index.cut(from_s, to_s) == want, (from_s, to_s)
    check(odd, (offsets, sizes, dts, pts, steps, sync))
