"""Everything the loader keeps per file is under a setting (docs/memory.md): with the MP4 indexes' and the
parquet footers' bounds below one file's, every frame still comes back right, and `loader.stats()` says what
each bounded structure holds against its bound."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dali_stream import ConfigError, StreamLoader
from dali_stream.tools.paint import read_ids
from tests.decode.test_frame_cache import assert_same

BOUNDED = ("fetched_episodes", "pieces_ahead", "mp4_indexes", "table_footers", "shared_row_groups",
           "cpu_decoders", "host_buffers", "decoded_frames", "open_episode_frames")


@pytest.mark.parametrize("pool", [2, "all"])
def test_a_dataset_with_more_index_than_its_bound_gets_every_frame_right(four_codec_dataset, pool):
    """index_bytes=1 and footer_bytes=1 keep one video file's index and one data file's footer at a time; long
    episodes' pieces (segment_bytes=1) are cut from the index of each sample's file, so files are indexed again
    over and over: every camera frame of the epoch is the (episode, frame) the batch names, on H.264 (B-frames),
    HEVC and AV1 through torchcodec and VP9 through DALI."""
    loader = StreamLoader(str(four_codec_dataset), batch_size=4, episode_pool_size=pool, device="cpu",
                          image_dtype="uint8", decode="cpu", index_bytes=1, footer_bytes=1, segment_bytes=1,
                          seed=3)
    frames = 0
    for batch in loader:
        for key in loader.meta.video_keys:
            for i in range(len(batch["index"])):
                want = (int(batch["episode_index"][i]), int(batch["frame_index"][i]))
                assert read_ids(batch[key][i]) == want, (key, i)
                frames += 1
    assert frames == len(loader.meta.video_keys) * 4 * len(loader)
    stats = loader.stats()
    assert set(stats["bounded"]) == set(BOUNDED)
    indexes, footers = stats["bounded"]["mp4_indexes"], stats["bounded"]["table_footers"]
    assert (indexes["bound"], indexes["setting"], footers["bound"], footers["setting"]) == \
        (1, "index_bytes", 1, "footer_bytes")
    assert indexes["files"] == 1 and indexes["evictions"] > 0 and 0 < indexes["held"] <= indexes["peak"]
    assert footers["files"] == 1 and footers["evictions"] > 0
    assert stats["fetch"]["pieces_cut"] > 0
    loader.close()


def test_stats_report_each_bound_from_its_setting(small_dataset):
    """Each bounded structure names its setting and carries the loader's value; held never exceeds a byte bound
    that admits more than one file; the counters are the store's."""
    loader = StreamLoader(str(small_dataset), batch_size=4, device="cpu", cache_bytes=1 << 26,
                          index_bytes=1 << 24, footer_bytes=1 << 23, max_decoders=3)
    next(iter(loader))
    bounded = loader.stats()["bounded"]
    assert bounded["fetched_episodes"]["bound"] == 1 << 26 and bounded["fetched_episodes"]["setting"] == "cache_bytes"
    assert bounded["mp4_indexes"]["bound"] == 1 << 24 and bounded["table_footers"]["bound"] == 1 << 23
    assert bounded["cpu_decoders"]["bound"] == 3 and bounded["cpu_decoders"]["unit"] == "decoders"
    held = bounded["open_episode_frames"]  # the pool's episodes, each camera decoded once (default bound)
    assert held["setting"] == "episode_frames_bytes" and held["bound"] == loader.resolved.episode_frames == 1 << 30
    assert held["held"] <= held["peak"] <= held["bound"] and held["peak"] > 0, held
    for name in ("fetched_episodes", "mp4_indexes", "table_footers"):
        part = bounded[name]
        assert 0 < part["held"] <= part["peak"] <= part["bound"], (name, part)
    assert loader.stats()["fetch"]["episodes"] == len(loader.fetched_episodes()) > 0
    loader.close()


@pytest.mark.parametrize("name", ["index_bytes", "footer_bytes"])
@pytest.mark.parametrize("value", [0, -5, 1.5, "1G"])
def test_bounds_must_be_positive_byte_counts(small_dataset, name, value):
    with pytest.raises(ConfigError, match=rf"`{name}` must be a positive integer \(bytes\)\. Found: "):
        StreamLoader(str(small_dataset), **{name: value})


@pytest.mark.filterwarnings("ignore:the episode cache holds")  # 7 episodes: the lookahead pins them all at once
def test_a_pool_drops_retired_episodes_where_its_epoch_does_not_fit_the_cache(small_dataset):
    """A pool retires an episode for the rest of the epoch: where the rank's episodes do not fit `cache_bytes`, an
    LRU would evict each before the next epoch comes back to it, so it is dropped when retired (the long-run
    growth of a 200,000-episode dataset, benchmarks/scale_video.py); the batches are the same as with a cache
    that keeps them all, and where the epoch fits, epoch 2 is served from the cache."""
    args = dict(batch_size=4, episode_pool_size=2, device="cpu", image_dtype="uint8", seed=5)
    roomy = StreamLoader(str(small_dataset), **args)
    want = [list(roomy) for _ in range(2)]
    assert roomy.stats()["fetch"]["retired_dropped"] == 0
    stats = roomy.stats()
    assert stats["fetch"]["hits"] > 0 and stats["bounded"]["fetched_episodes"]["episodes"] == roomy.meta.num_episodes
    fetched = roomy.stats()["fetch"]["demand_fetches"] + roomy.stats()["fetch"]["prefetches"]
    assert fetched == roomy.meta.num_episodes, "epoch 2 fetched nothing again"
    whole = roomy.stats()["bounded"]["fetched_episodes"]["held"]
    roomy.close()

    # a third of the epoch: the estimate (the mean of the episodes fetched so far, whatever order the fetch threads
    # finish in) is over the bound from the first episode on; just under the whole epoch it would depend on that order
    tight = StreamLoader(str(small_dataset), **args, cache_bytes=whole // 3)
    got = [list(tight) for _ in range(2)]
    stats = tight.stats()
    assert stats["fetch"]["retired_dropped"] >= 2 * tight.meta.num_episodes - 2, stats["fetch"]
    assert stats["bounded"]["fetched_episodes"]["held"] == 0
    for epoch_got, epoch_want in zip(got, want):
        assert_same(epoch_got, epoch_want)
    tight.close()


FREED = r"""
import sys
import numpy as np
from dali_stream.loader.memory import _LIBC, FreedMemory, _handed_out, _trim
if _handed_out(_LIBC)() is None:
    print("SKIP no mallinfo2")
    sys.exit(0)
real, trims = _trim(_LIBC), []
freed = FreedMemory(lambda: (trims.append(1), real()), _handed_out(_LIBC), slack=64 << 20)
freed()
assert len(trims) == 1, "the first look trims: nothing to compare with"
churn = [np.ones(8192) for _ in range(300)]  # 19 MB taken and given back: under the slack
del churn
freed()
assert len(trims) == 1, ("trimmed under the slack", freed.free_bytes() - freed.after)
blocks = [np.ones(8192) for _ in range(3000)]  # 64 KiB each, from malloc's arena (under its mmap threshold)
del blocks[::2]  # 96 MB freed between blocks still in use: malloc keeps it, resident
held = freed.free_bytes()
assert held - freed.after > 64 << 20, (held, freed.after)
freed()
assert len(trims) == 2 and freed.after < held - (48 << 20), ("the trim handed back too little", held, freed.after)
print("OK", held >> 20, freed.after >> 20)
"""


def test_freed_memory_goes_back_only_once_malloc_holds_more_than_the_slack():
    """The loader's look at freed memory (every 32 batches) trims only where what malloc keeps free grew past the
    slack since the last trim: real glibc, real numpy blocks freed between blocks still in use."""
    proc = subprocess.run([sys.executable, "-c", FREED], capture_output=True, text=True, timeout=120)
    if proc.stdout.startswith("SKIP"):
        pytest.skip("this C library has no mallinfo2 (glibc 2.33 and later)")
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr
