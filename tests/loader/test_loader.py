"""StreamLoader end to end: lerobot's sample contract, frame accuracy per codec and route, epochs, resume."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
import torch

from dali_stream import ConfigError, StreamLoader
from dali_stream.tools.paint import read_ids
from tests.support.parts import built
from tests.support.processes import alive
from tests.support.reference import Reference
from tests.support.take import take

FPS = 30
CAMERAS = ["observation.images.front", "observation.images.side", "observation.images.wrist",
           "observation.images.top"]
DELTAS = {
    "action": [i / FPS for i in range(-2, 6)],  # pads at both ends of every episode
    "observation.state": [-3 / FPS, 0.0],
    "observation.images.wrist": [-2 / FPS, 0.0, 3 / FPS],  # av1, windowed
    "observation.images.top": [-1 / FPS, 0.0, 1 / FPS],  # vp9, windowed: DALI decodes a frame list
}


def _samples(batch):
    """Split a batch dict into per-sample dicts of numpy values (task strings kept)."""
    n = len(batch["task"])
    return [{k: (v[i] if k == "task" else v[i].numpy()) for k, v in batch.items()} for i in range(n)]


def _to_uint8(img: np.ndarray) -> np.ndarray:
    return np.rint(img * 255).astype(np.uint8) if img.dtype == np.float32 else img


@pytest.fixture(scope="module")
def reference(four_codec_dataset):
    return Reference(four_codec_dataset, DELTAS)


@pytest.mark.parametrize("decode", ["cpu", "auto", "dali-cpu"])
def test_epoch_matches_lerobot_contract(four_codec_dataset, reference, decode):
    loader = StreamLoader(str(four_codec_dataset), batch_size=5, delta_timestamps=DELTAS, episode_pool_size=3,
                          seed=3, decode=decode, device="cpu", num_workers=2, drop_last=False)
    expect_routes = {"cpu": ["torchcodec"] * 4, "auto": ["torchcodec"] * 4,
                     "dali-cpu": ["torchcodec", "torchcodec", "torchcodec", "dali-cpu"]}
    assert [loader.routes[k] for k in CAMERAS] == expect_routes[decode]
    seen = []
    pads_front = pads_back = 0
    batches = 0
    for batch in loader:
        batches += 1
        for s in _samples(batch):
            index = int(s["index"])
            seen.append(index)
            ref = reference.item(index)
            assert set(s) == set(ref), "batch keys differ from lerobot's"
            for key, want in ref.items():
                got = s[key]
                if key == "task":
                    assert got == want
                elif key in CAMERAS:
                    assert got.dtype == np.float32 and 0.0 <= got.min() and got.max() <= 1.0
                    assert got.shape == want.shape, key
                    got8 = _to_uint8(got)
                    frames_got = got8 if got8.ndim == 4 else got8[None]
                    frames_want = want if want.ndim == 4 else want[None]
                    assert [read_ids(f) for f in frames_got] == [read_ids(f) for f in frames_want], (key, index)
                    diff = np.abs(got8.astype(np.int16) - want.astype(np.int16))
                    if loader.routes[key] == "torchcodec":  # same decoder, same packets: lerobot's values exactly
                        assert diff.max() == 0, (key, index)
                        np.testing.assert_array_equal(got, want.astype(np.float32) / np.float32(255),
                                                      err_msg=f"{key} of index {index}: not lerobot's x / 255")
                    else:  # DALI's YUV->RGB differs from FFmpeg's at sharp edges only
                        assert diff.mean() < 4, (key, index, diff.mean())
                else:
                    assert got.dtype == want.dtype and got.shape == want.shape, (key, got.dtype, want.dtype)
                    np.testing.assert_array_equal(got, want, err_msg=f"{key} of index {index}")
            pads_front += bool(s["action_is_pad"][0])
            pads_back += bool(s["action_is_pad"][-1])
    assert batches == -(-reference.info["total_frames"] // 5)
    assert sorted(seen) == list(range(reference.info["total_frames"])), "every frame exactly once per epoch"
    assert pads_front > 0 and pads_back > 0


def test_painted_ids_match_plan_for_every_camera(four_codec_dataset):
    """Every image, every window step: painted (episode, frame) == (episode_index, clamped frame + offset)."""
    deltas = {k: [-1 / FPS, 0.0, 2 / FPS] for k in CAMERAS}
    loader = StreamLoader(str(four_codec_dataset), batch_size=4, delta_timestamps=deltas, episode_pool_size=4,
                          seed=0, decode="auto", device="cpu", num_workers=0, drop_last=False,
                          image_dtype="uint8")
    lengths = {int(e): int(n) for e, n in zip(loader.meta.episodes["episode_index"], loader.meta.lengths)}
    checked = 0
    for batch in loader:
        for s in _samples(batch):
            ep, fr = int(s["episode_index"]), int(s["frame_index"])
            want = [(ep, min(max(fr + d, 0), lengths[ep] - 1)) for d in (-1, 0, 2)]
            for key in CAMERAS:
                assert s[key].dtype == np.uint8 and s[key].shape == (3, 3, 96, 128)
                assert [read_ids(f) for f in s[key]] == want, key
                np.testing.assert_array_equal(s[f"{key}_is_pad"], [fr - 1 < 0, False, fr + 2 >= lengths[ep]])
                checked += 3
    assert checked == 3 * 4 * loader.meta.total_frames


def test_unwindowed_images_are_chw_and_batches_have_batch_size(small_dataset):
    loader = StreamLoader(str(small_dataset), batch_size=4, episode_pool_size=2, device="cpu", num_workers=1)
    n = 0
    for batch in loader:
        n += 1
        for key in ("observation.images.front", "observation.images.top"):
            assert batch[key].shape == (4, 3, 96, 128) and batch[key].dtype == torch.float32
        assert batch["index"].dtype == torch.int64 and batch["timestamp"].dtype == torch.float32
        assert batch["observation.state"].shape == (4, 6) and batch["next.done"].dtype == torch.bool
        assert not any(k.endswith("_is_pad") for k in batch)
        assert len(batch["task"]) == 4 and all(isinstance(t, str) and t for t in batch["task"])
    assert n == len(loader) == loader.meta.total_frames // 4


def _run(loader, limit=None):
    """(index list, painted camera ids) per batch for one `for` over the loader, stopping after `limit`."""
    out = []
    for batch in loader:
        out.append((batch["index"].tolist(), [read_ids(f) for f in batch["observation.images.top"][:, -1]],
                    [read_ids(f) for f in batch["observation.images.front"]]))
        if limit is not None and len(out) >= limit:
            break
    return out


RESUME_ARGS = dict(batch_size=3, episode_pool_size=2, seed=11, device="cpu",
                   delta_timestamps={"action": [0.0, 1 / FPS], "observation.images.top": [-1 / FPS, 0.0]})


@pytest.fixture(scope="module")
def uninterrupted(small_dataset):
    loader = StreamLoader(str(small_dataset), num_workers=2, **RESUME_ARGS)
    return [_run(loader), _run(loader)]  # epochs 0 and 1


# dali: VP9 through DALI's CPU decoder on the workers, each open episode's cameras decoded once (no DALI graph);
# dali-graph: VP9 in the DALI graph, every camera decoded per sample; cpu: torchcodec alone (no graph, what `auto`
# takes on a CPU node)
DECODES = {"dali": dict(decode="dali-cpu"), "dali-graph": dict(decode="dali-cpu", episode_frames_bytes=0),
           "cpu": dict(decode="cpu")}


@pytest.mark.parametrize("decode", list(DECODES))
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("stop", ["start", "one", "middle", "before_end", "epoch_end"])
def test_exact_resume(small_dataset, uninterrupted, num_workers, stop, decode):
    epoch0, epoch1 = uninterrupted
    assert epoch0 != epoch1, "epochs must be reshuffled"
    k = {"start": 0, "one": 1, "middle": len(epoch0) // 2, "before_end": len(epoch0) - 1,
         "epoch_end": len(epoch0)}[stop]
    first = StreamLoader(str(small_dataset), num_workers=2, **DECODES[decode], **RESUME_ARGS)
    assert first.host_batches == (decode != "dali-graph")
    if k == len(epoch0):
        got = _run(first)  # ran to the end of the epoch
    else:
        got = _run(first, limit=k) if k else []
    assert got == epoch0[:k]
    state = json.loads(json.dumps(first.state_dict()))
    assert (state["epoch"], state["batches_consumed"]) == ((1, 0) if k == len(epoch0) else (0, k))
    del first

    second = StreamLoader(str(small_dataset), num_workers=num_workers, **DECODES[decode], **RESUME_ARGS)
    second.load_state_dict(state)
    if k < len(epoch0):
        assert len(second) == len(epoch0)
        rest = _run(second)
        assert rest == epoch0[k:]
        # Nothing consumed before the resume point was fetched unless a later batch needs its episode.
        needed = {int(p) for b in range(k, len(epoch0)) for p in second.epoch_plan(0).batch(b).episodes}
        assert second.fetched_episodes() == needed
    assert _run(second) == epoch1


@pytest.mark.parametrize("decode", ["auto", "cpu"])
def test_break_mid_epoch_starts_next_epoch(small_dataset, uninterrupted, decode):
    epoch0, epoch1 = uninterrupted
    loader = StreamLoader(str(small_dataset), num_workers=2, decode=decode, **RESUME_ARGS)
    assert _run(loader, limit=2) == epoch0[:2]
    assert loader.state_dict()["batches_consumed"] == 2
    assert _run(loader) == epoch1
    assert loader.state_dict()["epoch"] == 2 and loader.state_dict()["batches_consumed"] == 0


def test_plans_do_not_depend_on_num_workers(small_dataset, uninterrupted):
    loader = StreamLoader(str(small_dataset), num_workers=0, **RESUME_ARGS)
    assert _run(loader) == uninterrupted[0]


def test_state_dict_is_small_json(small_dataset):
    loader = StreamLoader(str(small_dataset), num_workers=0, **RESUME_ARGS)
    state = loader.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert {"version", "seed", "epoch", "batches_consumed", "batch_size", "world_size"} <= set(state)
    assert "rank" not in state  # one checkpoint serves every rank
    assert len(json.dumps(state)) < 2000


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_stream_disjoint_shares_that_cover_the_dataset(small_dataset, world_size):
    shares, episodes = [], []
    for rank in range(world_size):
        loader = StreamLoader(str(small_dataset), batch_size=2, episode_pool_size=2, device="cpu", num_workers=1,
                              drop_last=False, rank=rank, world_size=world_size)
        batches = list(loader)
        shares.append([i for b in batches for i in b["index"].tolist()])
        episodes.append({e for b in batches for e in b["episode_index"].tolist()})
    assert len({len(share) for share in shares}) == 1, "equal samples per rank (smaller shares padded)"
    own = [list(dict.fromkeys(share)) for share in shares]  # own frames first, then repeats as padding
    flat = [i for share in own for i in share]
    assert sorted(flat) == list(range(loader.meta.total_frames)), "every frame once across ranks"
    assert all(a.isdisjoint(b) for n, a in enumerate(episodes) for b in episodes[n + 1:]), "whole episodes per rank"


def test_an_epoch_with_no_full_batch_is_an_error_naming_the_fix(small_dataset):
    """A batch larger than the frames with drop_last (the default when shuffling) would yield nothing, silently."""
    frames = StreamLoader(str(small_dataset), device="cpu").meta.total_frames
    with pytest.raises(ConfigError) as err:
        StreamLoader(str(small_dataset), batch_size=1000, device="cpu")
    said = str(err.value)
    assert "batch_size=1000" in said and f"hold {frames} frames" in said and "drop_last=False" in said, said
    assert "the default when shuffling" in said
    partial = StreamLoader(str(small_dataset), batch_size=1000, device="cpu", drop_last=False)
    (batch,) = list(partial)
    assert len(batch["task"]) == partial.meta.total_frames


@pytest.mark.parametrize("before,after", [(2, 3), (3, 2)])
def test_elastic_resume_on_another_world_size(small_dataset, before, after):
    """Stop mid-epoch on `before` ranks, finish it on `after` ranks from one checkpoint: exactly once."""
    args = dict(batch_size=2, episode_pool_size=2, seed=8, device="cpu", num_workers=1, drop_last=False)
    seen_before, state = [], None
    for rank in range(before):
        loader = StreamLoader(str(small_dataset), rank=rank, world_size=before, **args)
        for i, batch in enumerate(loader):
            seen_before += batch["index"].tolist()
            if i == 2:
                break
        state = state or json.loads(json.dumps(loader.state_dict()))
    assert len(seen_before) == len(set(seen_before)) == before * 3 * 2
    rest, lengths, next_epoch = [], set(), []
    for rank in range(after):
        loader = StreamLoader(str(small_dataset), rank=rank, world_size=after, **args)
        loader.load_state_dict(state)
        assert loader.state_dict()["elastic"] == [[before, 3]] and loader.state_dict()["batches_consumed"] == 0
        lengths.add(len(loader))
        indices = [i for b in loader for i in b["index"].tolist()]
        rest.append(list(dict.fromkeys(indices)))  # own frames; the rest is padding
        assert loader.state_dict()["elastic"] == [] and loader.state_dict()["epoch"] == 1
        next_epoch += [i for b in loader for i in b["index"].tolist()]
    own_after = [i for r in rest for i in r]
    total = loader.meta.total_frames
    assert len(lengths) == 1, "equal batch counts on the new world"
    assert len(own_after) == len(set(own_after)) and not set(own_after) & set(seen_before)
    assert sorted(set(own_after) | set(seen_before)) == list(range(total)), "no frame lost or repeated"
    assert set(next_epoch) == set(range(total)), "the next epoch runs whole on the new world"


def test_uneven_rank_shares_warn(small_dataset):
    with pytest.warns(UserWarning, match=r"uneven shares of epoch 0: \d+ to \d+ frames over 6 ranks"):
        StreamLoader(str(small_dataset), rank=0, world_size=6, batch_size=2, device="cpu")


def test_cpu_decoders_alive_are_bounded(small_dataset):
    """max_decoders bounds the torchcodec decoders kept for reuse (plus one per worker thread decoding), not
    pool x cameras x threads; the batches stay the same. (Per sample: with the open episodes' frames held, each
    episode's camera opens one decoder once.)"""
    args = dict(batch_size=4, episode_pool_size=4, seed=2, device="cpu", num_workers=2, decode="cpu",
                episode_frames_bytes=0)
    free = StreamLoader(str(small_dataset), **args)
    want = [b["index"].tolist() for b in free]
    tight = StreamLoader(str(small_dataset), max_decoders=2, **args)
    assert [b["index"].tolist() for b in tight] == want
    cache, closed = tight.stats()["bounded"]["cpu_decoders"], tight.stats()["decoders"]["closed"]
    assert cache["peak"] <= 2 + 2 and closed > 0 and cache["held"] == 0
    assert free.stats()["bounded"]["cpu_decoders"]["peak"] > cache["peak"]


# ---- lerobot's habits -------------------------------------------------------------------------------------
def test_episode_subset_trimming_and_exact_resume(small_dataset):
    """episodes=[...] draws (and fetches) only those; drop_n_first/last_frames trims what is drawn; a state
    resumes exactly over the subset and refuses another subset."""
    from dali_stream import StateError

    args = dict(batch_size=3, episode_pool_size=2, seed=4, device="cpu", episodes=[1, 3, 4, 6],
                drop_n_first_frames=1, drop_n_last_frames=2, delta_timestamps={"action": [0.0, 1 / 30]})
    loader = StreamLoader(str(small_dataset), **args)
    lengths = dict(zip(loader.meta.episodes["episode_index"].tolist(), loader.meta.lengths.tolist()))
    full = [b for b in loader]
    pairs = [(e, f) for b in full for e, f in zip(b["episode_index"].tolist(), b["frame_index"].tolist())]
    want = {(e, f) for e in (1, 3, 4, 6) for f in range(1, lengths[e] - 2)}
    assert set(pairs) <= want and len(pairs) == len(set(pairs)) and len(want) - len(pairs) < 3  # drop_last
    assert loader.fetched_episodes() <= {p for p, e in enumerate(loader.meta.episodes["episode_index"].tolist())
                                           if e in (1, 3, 4, 6)}, "only the subset is fetched"
    first = StreamLoader(str(small_dataset), **args)
    for i, _ in enumerate(first):
        if i == 2:
            break
    state = first.state_dict()
    again = StreamLoader(str(small_dataset), **args)
    again.load_state_dict(state)
    assert [b["index"].tolist() for b in again] == [b["index"].tolist() for b in full[3:]]
    other = StreamLoader(str(small_dataset), **{**args, "episodes": [1, 3, 4]})
    with pytest.raises(StateError, match="selection"):
        other.load_state_dict(state)


def test_unshuffled_evaluation_pass_in_order(small_dataset):
    """shuffle=False is an evaluation pass: every frame once, in order, the tail kept without asking (drop_last
    defaults to False there, as lerobot's evaluation loaders keep every sample; True when shuffling)."""
    loader = StreamLoader(str(small_dataset), batch_size=4, device="cpu", shuffle=False, max_episodes=5,
                          image_dtype="uint8")
    assert loader.resolved.drop_last is False and loader.state_dict()["drop_last"] is False
    assert StreamLoader(str(small_dataset), batch_size=4, device="cpu").resolved.drop_last is True
    pairs = []
    for batch in loader:
        for i, (e, f) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
            assert read_ids(batch["observation.images.front"][i]) == (e, f)
            pairs.append((e, f))
    lengths = loader.meta.lengths.tolist()[:5]
    assert pairs == [(e, f) for e in range(5) for f in range(lengths[e])]
    assert [b["index"].tolist() for b in loader][:2] == [[0, 1, 2, 3], [4, 5, 6, 7]], "the next pass is the same"


@pytest.mark.parametrize("kwargs,match", [({"episodes": [0, 99]}, r"episodes \[99\] that the dataset does not have"),
                                          ({"episodes": []}, "selects no episode"),
                                          ({"max_episodes": 0}, "max_episodes"),
                                          ({"episodes": "0,1"}, "list of episode indices")])
def test_bad_selections(small_dataset, kwargs, match):
    from dali_stream import ConfigError

    with pytest.raises(ConfigError, match=match):
        StreamLoader(str(small_dataset), **kwargs)


def test_frames_dropped_past_the_episodes_are_named_with_the_fix(small_dataset):
    """drop_n_first_frames/drop_n_last_frames that leave no episode (or fewer than the ranks) a frame to draw say so,
    with their values and the longest episode's length, not that the dataset is too small for the ranks."""
    from dali_stream import open_meta

    lengths = np.sort(open_meta(str(small_dataset)).lengths)
    longest = int(lengths[-1])
    with pytest.raises(ConfigError, match=rf"drop_n_first_frames={longest - 3} and drop_n_last_frames=3 leave 0 of "
                                          rf"the {len(lengths)} episodes in use a frame to draw \(the longest episode "
                                          rf"has {longest} frames\), and the one rank needs one: lower them so that "
                                          rf"together they stay under {longest} frames$"):
        StreamLoader(str(small_dataset), device="cpu", drop_n_first_frames=longest - 3, drop_n_last_frames=3)
    drops = int(lengths[lengths < longest].max())  # only the longest episodes keep frames
    left = int(np.count_nonzero(lengths > drops))
    with pytest.raises(ConfigError, match=rf"drop_n_first_frames=0 and drop_n_last_frames={drops} leave {left} of "
                                          rf"the {len(lengths)} episodes .* each of the world_size={left + 1} ranks "
                                          rf"needs one: .* or use at most {left} ranks"):
        StreamLoader(str(small_dataset), device="cpu", drop_n_last_frames=drops, shuffle=False, rank=0,
                     world_size=left + 1)


# ---- lifecycle and logging -------------------------------------------------------------------------------
def _with_store(**settings):
    """A loader of `small_dataset`'s settings and its episode store, caught as the loader builds it
    (`tests/support/parts.py`): the tests of what the loader's own fetch threads and store lock do when it is collected."""
    from dali_stream.fetch.store import EpisodeStore

    with built(EpisodeStore) as stores:
        loader = StreamLoader(**settings)
    (store,) = stores
    return loader, store


def _threads_of(store) -> list:
    threads = list(store.fetcher.pool._threads)
    assert threads and all(t.name.startswith("dali-stream-fetch") for t in threads)
    return threads


def _ended(threads, timeout_s: float = 10.0) -> bool:
    for thread in threads:
        thread.join(timeout_s)
    return not any(t.is_alive() for t in threads)


def test_close_and_with_end_the_threads_and_the_loader(small_dataset):
    from dali_stream import ConfigError

    loader, store = _with_store(source=str(small_dataset), batch_size=2, episode_pool_size=2, device="cpu",
                                fetch_workers=2)
    with loader:
        next(iter(loader))
        threads = _threads_of(store)
    assert _ended(threads) and loader.stats()["bounded"]["cpu_decoders"]["held"] == 0
    assert loader.stats()["episode_frames"]["held"] == 0  # the open episodes' frames dropped with the decoders
    with pytest.raises(ConfigError, match="closed"):
        iter(loader)
    other, store = _with_store(source=str(small_dataset), batch_size=2, episode_pool_size=2, device="cpu",
                               fetch_workers=2)
    for _ in other:
        break
    threads = _threads_of(store)
    other.close()  # while the loader is still referenced: no garbage collection involved
    assert _ended(threads, timeout_s=2.0)
    other.close()  # twice is fine


@pytest.mark.parametrize("decode", ["cpu", "cpu-open"])
def test_a_for_still_running_at_close_ends_with_the_closed_loaders_error(small_dataset, decode):
    """close() while an iterator is still held: its next batch is the closed loader's ConfigError (saying where the
    state stands), not the rest of the epoch from closed threads and decoders; load_state_dict is refused too."""
    loader = StreamLoader(str(small_dataset), batch_size=2, device="cpu", decode=decode)
    batches = iter(loader)
    next(batches)
    state = loader.state_dict()
    loader.close()
    with pytest.raises(ConfigError, match=r"closed .*while an epoch was being iterated.*epoch 0, batch 1"):
        next(batches)
    with pytest.raises(ConfigError, match="closed"):
        loader.load_state_dict(state)


def test_a_loader_collected_on_its_own_fetch_thread_ends_cleanly(small_dataset, monkeypatch):
    """The last reference dropped inside one of the loader's fetch threads (as a failed batch's traceback can
    do): the finalizer runs there and must not try to join that thread."""
    import gc
    import sys
    import threading

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    loader, store = _with_store(source=str(small_dataset), batch_size=2, episode_pool_size=2, device="cpu",
                                fetch_workers=1)
    box = [loader]
    del loader
    pool = store.fetcher.pool
    pool.submit(lambda: None).result()  # the pool's thread exists now
    threads = _threads_of(store)
    done = threading.Event()

    def drop():
        box.clear()
        gc.collect()  # the loader's finalizer runs here, on its own fetch thread
        done.set()

    pool.submit(drop)
    assert done.wait(30)
    assert _ended(threads) and pool._shutdown  # closed on a thread of its own: give it time to run
    assert unraisable == [], [u.exc_value for u in unraisable]


def test_a_loader_collected_on_a_thread_its_fetches_wait_for_does_not_deadlock(small_dataset):
    """Seen in CI: garbage collection ran the finalizer on fsspec's event-loop thread while a fetch thread waited
    for that loop; joining the fetch thread there never returned. Here a fetch waits for a thread, and that
    thread drops the last reference: the finalizer must tell the threads to end without waiting for them."""
    import gc
    import threading

    loader, store = _with_store(source=str(small_dataset), batch_size=2, episode_pool_size=2, device="cpu",
                                fetch_workers=1)
    box = [loader]
    del loader
    pool = store.fetcher.pool
    loop_free, done = threading.Event(), threading.Event()
    pool.submit(loop_free.wait)  # the fetch thread now waits for the "loop" thread below
    threads = _threads_of(store)

    def loop():
        box.clear()
        gc.collect()  # the loader's finalizer runs here
        loop_free.set()
        done.set()

    threading.Thread(target=loop, daemon=True).start()
    try:
        assert done.wait(30), "the finalizer waited for a fetch thread that was waiting for it"
    finally:
        loop_free.set()  # a failed run must not leave the pool's thread blocked at interpreter exit
    assert _ended(threads) and pool._shutdown


def test_a_loader_collected_while_its_store_lock_is_held_does_not_deadlock(small_dataset):
    """Garbage collection can run the finalizer on a thread inside one of the store's locked sections (any
    allocation there): closing the store on that thread would wait for a lock it holds itself."""
    import gc
    import threading

    loader, store = _with_store(source=str(small_dataset), batch_size=2, episode_pool_size=2, device="cpu",
                                fetch_workers=1)
    box = [loader]
    del loader
    store.fetcher.pool.submit(lambda: None).result()
    threads = _threads_of(store)
    done = threading.Event()

    def locked_section():
        with store._lock:
            box.clear()
            gc.collect()  # the loader's finalizer runs here, inside the store's lock
        done.set()

    threading.Thread(target=locked_section, daemon=True).start()
    assert done.wait(30), "the finalizer waited for a lock its own thread holds"
    assert _ended(threads) and store.fetcher.pool is None


def test_routes_and_settings_are_logged_not_printed(small_dataset, caplog, capsys):
    import logging

    with caplog.at_level(logging.INFO, logger="dali_stream"):
        loader = StreamLoader(str(small_dataset), batch_size=2, device="cpu")
        for _ in loader:
            break
    text = caplog.text
    assert "camera observation.images.top: torchcodec" in text and "batches on cpu" in text
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


EXIT_SCRIPT = r"""
import atexit, gc, sys, threading, time
closed = []

@atexit.register  # registered first, so it runs last: after dali_stream's own exit hook
def report():
    print("store closed:", closed, flush=True)

from dali_stream import ConfigError, StreamLoader
from dali_stream.fetch.store import EpisodeStore

original = EpisodeStore.close
def recording_close(self, wait=True):
    time.sleep(0.5)  # a slow close: the interpreter must not tear down under it
    original(self, wait)
    closed.append(threading.current_thread().name)
EpisodeStore.close = recording_close

loader = StreamLoader(sys.argv[1], batch_size=2, episode_pool_size=2, device="cpu", fetch_workers=2)
it = iter(loader)
next(it)
if sys.argv[2] == "collected":  # the last reference dropped just before exit, as a script's main() returning does
    it.close()
    del it, loader
    gc.collect()
# else: left open, mid-epoch, at exit
"""


@pytest.mark.parametrize("how,closed_on", [("open", "MainThread"), ("collected", "dali-stream-close")])
def test_a_loader_at_exit_is_closed_before_the_interpreter_tears_down(small_dataset, how, closed_on):
    """A thread of our own still closing a store during the interpreter's teardown was killed there (in
    pyarrow's ParquetReader dealloc: 'terminate called without an active exception', an abort in ~1 exit in 5
    of a full 480p epoch). A loader left open is closed by an exit hook on the main thread; a loader collected
    just before exit is closed on a thread the interpreter joins before tearing down."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(small_dataset), how], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"store closed: [{closed_on!r}]" in proc.stdout, proc.stdout + proc.stderr


def test_a_mistyped_window_key_gets_a_did_you_mean(small_dataset):
    with pytest.raises(ConfigError, match=r"did you mean 'observation.images.front' for 'observation.image.front'"):
        StreamLoader(str(small_dataset), delta_timestamps={"observation.image.front": [0.0]}, device="cpu")


def test_dataset_statistics_as_lerobot_reads_them(small_dataset):
    """`loader.meta.stats`: meta/stats.json as lerobot's `dataset.meta.stats` (feature -> statistic -> array)."""
    import json

    loader = StreamLoader(str(small_dataset), device="cpu")
    raw = json.loads((small_dataset / "meta" / "stats.json").read_text())
    stats = loader.meta.stats
    assert set(stats) == set(raw) and {"mean", "std", "min", "max"} <= set(stats["observation.state"])
    np.testing.assert_allclose(stats["observation.state"]["mean"], raw["observation.state"]["mean"])
    assert stats["observation.images.front"]["mean"].shape == (3, 1, 1)  # per channel, broadcastable over CHW


def _jitter(frames):
    """A transform drawing from torch's global RNG, as torchvision's v2 transforms do."""
    return (frames + torch.rand(frames.shape[:-2]).unsqueeze(-1).unsqueeze(-1)).clamp(0, 1)


def test_image_transforms_per_sample_seeded_from_the_plan_so_resume_matches(small_dataset):
    """lerobot's image_transforms: applied to each sample's camera tensor on the batch's device, torch's RNG seeded
    per (seed, epoch, batch, sample, camera): the same batches twice, a resumed run equal to an uninterrupted one,
    samples of a batch transformed apart, and the caller's own RNG stream untouched."""
    args = dict(batch_size=4, episode_pool_size=3, seed=3, device="cpu", num_workers=1, image_transforms=_jitter,
                delta_timestamps={"observation.images.top": [-1 / 30, 0.0]})
    first = take(StreamLoader(str(small_dataset), **args), 4)
    torch.manual_seed(0)
    expected_draw = torch.rand(3)
    torch.manual_seed(0)
    again = take(StreamLoader(str(small_dataset), **args), 4)
    assert torch.equal(torch.rand(3), expected_draw), "the transforms' seeding leaked into the caller's RNG"
    for a, b in zip(first, again):
        assert torch.equal(a["observation.images.front"], b["observation.images.front"])
        assert torch.equal(a["observation.images.top"], b["observation.images.top"])
    plain = take(StreamLoader(str(small_dataset), **{**args, "image_transforms": None}), 1)[0]
    shift = first[0]["observation.images.front"] - plain["observation.images.front"]
    assert shift.shape == (4, 3, 96, 128) and len({round(float(s), 4) for s in shift[:, :, 0, 0].flatten()}) > 4
    resumed = StreamLoader(str(small_dataset), **args)
    head = StreamLoader(str(small_dataset), **args)
    take(head, 2)
    resumed.load_state_dict(head.state_dict())
    for a, b in zip(take(resumed, 2), first[2:]):
        assert torch.equal(a["observation.images.top"], b["observation.images.top"])


def test_image_transforms_run_in_worker_processes_with_the_same_pixels(small_dataset, caplog):
    """With num_workers > 0, CPU batches' transforms run in that many worker processes, each sample under the seed
    it has in the calling thread: the same batches as num_workers=0 (all in the calling thread), and as a
    transform that cannot be pickled (a lambda: it stays in the calling thread, with a warning saying why)."""
    args = dict(batch_size=6, episode_pool_size=3, seed=5, device="cpu", image_transforms=_jitter,
                delta_timestamps={"observation.images.front": [-2 / 30, 0.0]})
    with StreamLoader(str(small_dataset), num_workers=2, **args) as loader:
        assert loader.stats()["transforms"]["in_processes"]
        spread = take(loader, 3)
        workers = loader.stats()["transforms"]["pids"]
        assert len(workers) == 2 and all(alive(pid) and pid != os.getpid() for pid in workers)
    assert not any(alive(pid) for pid in workers), "the processes end with the loader"
    with StreamLoader(str(small_dataset), num_workers=0, **args) as loader:
        assert not loader.stats()["transforms"]["in_processes"]
        here = take(loader, 3)
    with caplog.at_level("WARNING", logger="dali_stream"):
        lam = StreamLoader(str(small_dataset), num_workers=2, **{**args, "image_transforms": lambda f: _jitter(f)})
    assert not lam.stats()["transforms"]["in_processes"] and "cannot go to worker processes" in caplog.text
    with lam:
        unpicklable = take(lam, 3)
    for a, b, c in zip(spread, here, unpicklable):
        for key in ("observation.images.front", "observation.images.top"):
            assert torch.equal(a[key], b[key]) and torch.equal(a[key], c[key]), key



def _stuck(frames):
    """A transform that does not return for a minute (a hung one, or a machine too loaded to run it)."""
    time.sleep(60)
    return frames


def test_closing_the_transform_pool_joins_what_it_terminates():
    """A worker that does not end when asked (here: mid-transform) is terminated and joined before close returns."""
    import threading

    from dali_stream.graph.transforms import TransformPool

    pool = TransformPool(_stuck, 1)
    pool.END_S = 0.5
    def transform():
        try:
            pool(torch.zeros(2, 3, 4, 4), [1, 2])
        except Exception:  # noqa: BLE001 - the pool closed under it: what this test does
            pass

    busy = threading.Thread(target=transform, daemon=True)
    busy.start()
    deadline = time.time() + 60
    while not pool._workers and time.time() < deadline:
        time.sleep(0.05)
    workers = list(pool._workers)
    time.sleep(1.0)  # the worker has taken the job
    t0 = time.perf_counter()
    pool.close()
    assert workers and not any(w.is_alive() for w in workers), "close returned with a worker alive"
    assert time.perf_counter() - t0 < 30 and all(w.exitcode is not None for w in workers)


def test_closing_a_loader_with_transforms_in_flight_returns(small_dataset):
    """The loader closed while its workers wait on the transform processes (a `with` block left mid-epoch, then
    the iterator dropped): nothing waits for results that will never come."""
    import threading

    loader = StreamLoader(str(small_dataset), batch_size=6, device="cpu", num_workers=2, image_transforms=_jitter,
                          episode_pool_size=3)
    batches = iter(loader)
    next(batches)
    done = threading.Event()

    def finish():
        loader.close()
        batches.close()
        done.set()

    threading.Thread(target=finish, daemon=True).start()
    assert done.wait(60), "close() or the iterator's close hung on the transform processes"


def test_transform_workers_zero_keeps_them_in_the_iterating_thread(small_dataset):
    loader = StreamLoader(str(small_dataset), batch_size=4, device="cpu", num_workers=2, image_transforms=_jitter,
                          transform_workers=0)
    assert not loader.stats()["transforms"]["in_processes"]
    with pytest.raises(ConfigError, match="transform_workers"):
        StreamLoader(str(small_dataset), device="cpu", transform_workers=-1)


GC_IN_THREADING = r"""
import sys, threading
from dali_stream import StreamLoader
from dali_stream.fetch.closer import in_background

loader = StreamLoader(sys.argv[1], batch_size=2, device="cpu")  # starts the closing thread
done = threading.Event()
# Garbage collection can run a loader's finalizer inside threading's bookkeeping, holding the lock a new thread
# takes before it counts as started: the finalizer must not start a thread there.
with threading._shutdown_locks_lock:
    in_background(done.set)
print("handed" if done.wait(60) else "not run", flush=True)
threading.Thread(target=lambda: None).start()  # thread starts still work
print("started", flush=True)
"""


def test_a_finalizer_inside_threadings_bookkeeping_starts_no_thread(small_dataset):
    """A loader collected while `threading` holds the lock every new thread takes (`_maintain_shutdown_locks`): its
    close is handed to the closing thread; starting a thread there deadlocked every later thread start (a first
    batch hung in `Thread.start` under load). A real child process: the deadlock would hang it, not the run."""
    import subprocess
    import sys

    try:
        proc = subprocess.run([sys.executable, "-c", GC_IN_THREADING, str(small_dataset)], capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the child hung: a thread started inside threading's bookkeeping ({exc.stdout!r})")
    assert proc.returncode == 0 and proc.stdout.split() == ["handed", "started"], proc.stdout + proc.stderr


FORKED = r"""
import os, sys, threading
from dali_stream import StreamLoader
from dali_stream.fetch.closer import in_background

loader = StreamLoader(sys.argv[1], batch_size=2, device="cpu")  # starts the closing thread, which a fork lacks
pid = os.fork()
if pid == 0:
    done = threading.Event()
    in_background(done.set)
    os._exit(0 if done.wait(30) else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_forked_child_closes_on_a_thread_of_its_own(small_dataset):
    """After a fork the closing thread does not exist in the child: what a finalizer hands over there still runs."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", FORKED, str(small_dataset)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["child", "0"], proc.stdout + proc.stderr


FORKED_AFTER_FETCHING = r"""
import os, signal, sys
from dali_stream import DaliStreamError, StreamLoader

loader = StreamLoader(sys.argv[1], batch_size=2, episode_pool_size=2, device="cpu", decode="cpu")
batches = iter(loader)
next(batches)  # its fetch threads have run
batches.close()
pid = os.fork()
if pid == 0:
    signal.alarm(60)  # a wait that never ends kills the child (SIGALRM) instead of hanging the test
    try:
        for _ in loader:  # an epoch needs episodes the parent never fetched
            pass
    except DaliStreamError as exc:
        print("error", exc, flush=True)
        os._exit(4)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_loader_used_in_a_process_forked_after_it_fetched_is_a_named_error(small_dataset):
    """A forked process has none of the fetch threads of a loader that fetched before the fork (a fetch they began,
    a task handed to their pool, never ends there): iterating it there raises, naming both processes and the fix,
    instead of waiting forever."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", FORKED_AFTER_FETCHING, str(small_dataset)], capture_output=True,
                          text=True, timeout=180)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines[-1:] == ["child 4"], proc.stdout + proc.stderr[-3000:]
    assert "forked from it after the loader had fetched" in lines[0] and "loader.dataset" in lines[0], lines[0]


def test_a_loader_on_open_meta_reads_what_a_loader_on_the_path_reads(small_dataset, monkeypatch):
    """`open_meta` then `StreamLoader(meta)`: the same batches as from the path, the metadata read once (the
    loader opens nothing), and the settings that open a dataset refused beside an opened one."""
    from dali_stream import open_meta
    from dali_stream.meta.dataset import DatasetMeta

    args = dict(batch_size=4, episode_pool_size=2, device="cpu", num_workers=0, decode="cpu",
                delta_timestamps={"action": [0.0, 1 / FPS]})
    with StreamLoader(str(small_dataset), **args) as loader:
        from_path = take(loader, 3)
    meta = open_meta(str(small_dataset))
    assert isinstance(meta, DatasetMeta) and meta.fps == FPS

    def refuse(*a, **k):
        raise AssertionError("the loader opened the dataset again")

    monkeypatch.setattr(DatasetMeta, "open", classmethod(refuse))
    with StreamLoader(meta, **args) as loader:
        assert loader.meta is meta
        got = take(loader, 3)
    assert len(got) == len(from_path) == 3
    for a, b in zip(got, from_path):
        assert a.keys() == b.keys() and a["task"] == b["task"] and all(torch.equal(a[k], b[k]) for k in a if k != "task")
    for setting in ({"revision": "main"}, {"storage_options": {"anon": True}}, {"remote_max_retries": 1}):
        with pytest.raises(ConfigError, match=rf"\['{next(iter(setting))}'\] open a dataset: give them to "
                                              r"dali_stream.open_meta"):
            StreamLoader(meta, **args, **setting)
