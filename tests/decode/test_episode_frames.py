"""The pool's open episodes' frames (`episode_frames_bytes`, `decode/open_episodes.py`): each CPU-decoded camera of
an episode decoded once, front to back, its frames held while the episode is open; every batch is the batch decoded
per sample, bit for bit."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dali_stream import ConfigError, StreamLoader
from dali_stream.decode.cpu import torchcodec_frames
from dali_stream.decode.open_episodes import EpisodeFrames
from tests.decode.test_frame_cache import assert_same
from tests.support.parts import store_of

ARGS = dict(batch_size=4, device="cpu", decode="dali-cpu", image_dtype="uint8", seed=5, episode_pool_size=3)
WINDOWS = {"observation.images.top": [-0.2, -0.1, 0.0], "observation.images.front": [-0.1, 0.0]}


def batches(loader, epochs=2):
    return [dict(b) for _ in range(epochs) for b in loader]


@pytest.mark.parametrize("setup", [
    dict(),  # host frames: torchcodec (H.264 with B-frames, HEVC, AV1) and DALI's CPU decoder (VP9) on the workers
    dict(image_dtype="float32", delta_timestamps=WINDOWS),  # windows, host frames scaled
    dict(resize=(40, 48)),  # through the DALI graph (torchcodec's pixels fed to it; VP9 too, decoded on the workers)
    dict(frame_cache_bytes=1 << 30),  # with the decoded-frame cache: epoch 2 read from there
    dict(shuffle=False),  # an evaluation pass: episodes in order
], ids=["host", "windows-float", "graph-resize", "frame-cache", "in-order"])
def test_batches_are_those_decoded_per_sample(four_codec_dataset, setup):
    """Two epochs with the open episodes' frames equal two decoded a sample at a time, every key and pixel, on four
    codecs (episodes starting mid-GOP, several files); each camera of each episode is decoded whole once an epoch
    (the cache's epoch 2 not at all), and every frame held is released by the epoch's end."""
    args = {**ARGS, "max_episodes": 6, **setup}
    plain = StreamLoader(str(four_codec_dataset), **args, episode_frames_bytes=0)
    assert plain.stats()["episode_frames"] is None and plain.resolved.episode_frames == 0
    want = batches(plain)
    plain.close()
    held = StreamLoader(str(four_codec_dataset), **args)
    assert held.resolved.episode_frames == 1 << 30
    # VP9 (dali-cpu) is decoded on the workers, where its frames can be held
    assert held.resolved.dali_on_workers == ("observation.images.top",)
    assert_same(batches(held), want)
    stats = held.stats()["episode_frames"]
    epochs = 1 if "frame_cache_bytes" in setup else 2
    assert stats["decoded_segments"] == 6 * 4 * epochs, stats
    assert stats["held"] == 0 and stats["segments"] == 0 and stats["refused"] == 0, stats
    assert 0 < stats["peak"] <= 1 << 30
    held.close()


def test_a_bound_holds_what_fits_and_decodes_the_rest_per_sample(four_codec_dataset):
    """An episode's camera is held where its frames take at most the bound's share (over the pool's episodes and the
    cameras): with a share of 30 frames, longer segments are decoded per sample; the same batches, the bound never
    passed."""
    args = {**ARGS, "max_episodes": 6, "decode": "cpu"}
    want = batches(StreamLoader(str(four_codec_dataset), **args, episode_frames_bytes=0), 1)
    frame = 96 * 128 * 3
    bound = 3 * 4 * 30 * frame  # pool 3, four cameras
    loader = StreamLoader(str(four_codec_dataset), **args, episode_frames_bytes=bound)
    assert loader.resolved.episode_frames_each == 30 * frame
    assert_same(batches(loader, 1), want)
    stats = loader.stats()["episode_frames"]
    assert stats["peak"] <= bound and stats["refused"] > 0 and stats["decoded_segments"] > 0, stats
    assert stats["decoded_frames"] <= 30 * stats["decoded_segments"]
    loader.close()


def test_defaults_and_errors(four_codec_dataset):
    """A global shuffle holds nothing (an episode's frames are drawn all along the epoch); the bound is checked."""
    loader = StreamLoader(str(four_codec_dataset), **{**ARGS, "episode_pool_size": "all", "max_episodes": 2})
    assert loader.resolved.episode_frames == 0 and loader.stats()["episode_frames"] is None
    assert "global shuffle" in loader.resolved.reasons["episode_frames"]
    assert loader.resolved.dali_on_workers == ()  # VP9 stays in the graph
    loader.close()
    held = StreamLoader(str(four_codec_dataset), **{**ARGS, "max_episodes": 2})
    assert held.resolved.episode_frames_each == (1 << 30) // (3 * 4)  # pool 3, four cameras on the workers
    held.close()
    with pytest.raises(ConfigError, match="episode_frames_bytes"):
        StreamLoader(str(four_codec_dataset), episode_frames_bytes=-1)


def _segments(dataset, n=2):
    store = store_of(dataset)
    segs = [store.segment(p, "observation.images.front") for p in range(n)]
    return store, segs


def _whole(segs):
    return [torchcodec_frames(s, np.arange(len(s.pts_s))) for s in segs]


def test_threads_asking_for_one_segment_decode_it_once(four_codec_dataset):
    """Eight threads ask for the same two segments at once: each is decoded once (claimed one at a time, each
    decoded alone, so a second thread takes the second segment), the others wait and get the same frames, each
    showing its painted frame."""
    store, segs = _segments(four_codec_dataset)
    episodes = EpisodeFrames(1 << 30)
    calls, started, go = [], threading.Event(), threading.Event()

    def decode_all(got):
        calls.append([s.uid for s in got])
        started.set()
        go.wait(5)
        return _whole(got)

    out: list = [None] * 8

    def ask(n):
        out[n] = episodes.take(segs, decode_all)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
    threads[0].start()
    started.wait(5)
    for t in threads[1:]:
        t.start()
    go.set()
    for t in threads:
        t.join(10)
    assert sorted(calls) == sorted([s.uid] for s in segs)
    for got in out:
        assert set(got) == {s.uid for s in segs}
        for s in segs:
            assert got[s.uid] is out[0][s.uid] and len(got[s.uid]) == len(s.pts_s)
            assert not got[s.uid].flags.writeable
    for s in segs:  # every frame the one a sample asking for it alone gets
        for k in np.random.default_rng(0).permutation(len(s.pts_s)):
            assert np.array_equal(out[0][s.uid][k], torchcodec_frames(s, np.array([k]))[0]), (s.episode, k)
    assert episodes.stats()["decoded_segments"] == 2
    for s in segs:
        episodes.release(s)
    assert episodes.stats()["held"] == 0
    store.close()


def test_a_segment_is_decoded_whole_from_the_second_batch_asking(four_codec_dataset):
    """The first batch that asks for a segment decodes its own frames (nothing held: an epoch's first batch draws
    from every episode of the pool at once); a later batch asking decodes it whole; asked again by an earlier
    batch (builders run ahead out of order) it stays per sample; without a batch, whole at once."""
    store, segs = _segments(four_codec_dataset)
    episodes = EpisodeFrames(1 << 30)
    assert episodes.take(segs, _whole, batch=3) == {}
    assert episodes.take(segs, _whole, batch=2) == {}  # built before batch 3's ask came: still its first
    assert episodes.stats()["first_asks"] == 4 and episodes.stats()["decoded_segments"] == 0
    got = episodes.take(segs[:1], _whole, batch=3)
    assert set(got) == {segs[0].uid} and len(got[segs[0].uid]) == len(segs[0].pts_s)
    episodes.release(segs[1])  # its episode retired: asked again, it is new
    assert episodes.take(segs[1:], _whole, batch=4) == {}
    assert set(episodes.take(segs[1:], _whole)) == {segs[1].uid}  # no batch: whole at once
    store.close()


def test_a_pool_epochs_first_batch_decodes_no_episode_whole(four_codec_dataset):
    """A pool's epoch: its first batch decodes only the frames it shows (the next batches the episodes whole); the
    same batches as decoded per sample."""
    args = {**ARGS, "max_episodes": 6, "decode": "cpu", "num_workers": 0, "prefetch_batches": 0}
    want = batches(StreamLoader(str(four_codec_dataset), **args, episode_frames_bytes=0), 1)
    loader = StreamLoader(str(four_codec_dataset), **args)
    got = iter(loader)
    first = dict(next(got))
    stats = loader.stats()["episode_frames"]
    assert stats["decoded_segments"] == 0 and stats["first_asks"] > 0, stats
    assert_same([first, *(dict(b) for b in got)], want)
    assert loader.stats()["episode_frames"]["decoded_segments"] > 0
    loader.close()


def test_a_failed_decode_wakes_its_waiters_and_holds_nothing(four_codec_dataset):
    """The thread whose decode fails raises; a thread waiting for that segment gets nothing (and decodes per
    sample, saying the error itself); nothing stays reserved."""
    store, segs = _segments(four_codec_dataset, 1)
    episodes = EpisodeFrames(1 << 30)
    started, go = threading.Event(), threading.Event()

    def failing(got):
        started.set()
        go.wait(5)
        raise RuntimeError("broken stream")

    errors, waited = [], []

    def first():
        try:
            episodes.take(segs, failing)
        except RuntimeError as exc:
            errors.append(exc)

    t = threading.Thread(target=first)
    t.start()
    started.wait(5)
    w = threading.Thread(target=lambda: waited.append(episodes.take(segs, _whole)))
    w.start()
    go.set()
    t.join(10)
    w.join(10)
    assert len(errors) == 1 and waited == [{}]
    assert episodes.stats()["held"] == 0
    assert set(episodes.take(segs, _whole)) == {segs[0].uid}  # asked again, decoded
    store.close()


def test_a_segment_released_while_decoding_is_not_kept(four_codec_dataset):
    store, segs = _segments(four_codec_dataset, 1)
    episodes = EpisodeFrames(1 << 30)

    def decode_all(got):
        episodes.release(got[0])  # its episode left the pool meanwhile
        return _whole(got)

    assert set(episodes.take(segs, decode_all)) == set()
    assert episodes.stats()["held"] == 0 and episodes.stats()["segments"] == 0
    store.close()


def test_dataloader_workers_forked_beside_the_loader_end_cleanly(small_dataset):
    """DALI's CPU decoder runs on the workers here (the VP9 camera's open episodes' frames held): a torch DataLoader
    whose workers are forked after a loader made its pipelines (one closed, one alive, as `bench` runs its baseline)
    collects garbage in them without shutting a pipeline down where its threads do not exist, which aborted the
    worker."""
    import subprocess
    import sys

    code = f"""
import gc
import torch
from torch.utils.data import DataLoader
from dali_stream import StreamLoader
first = StreamLoader({str(small_dataset)!r}, batch_size=4, device="cpu", decode="dali-cpu")
assert first.resolved.dali_on_workers
for _ in first:
    pass
first.close()
loader = StreamLoader({str(small_dataset)!r}, batch_size=4, device="cpu", decode="dali-cpu")
for _ in loader:
    pass
class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        gc.collect()
        return i * i
print("sum", sum(int(b.sum()) for b in DataLoader(Squares(), batch_size=8, num_workers=2)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "sum 85344" in done.stdout, done.stdout + done.stderr[-2000:]
