"""A global shuffle (`episode_pool_size='all'`) through the whole loader: nothing held whole, every frame right
(tests/loader/test_boundaries.py checks them on every route), resume exact, the setting checked and on the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dali_stream import ConfigError, LoaderConfig, StateError, StreamLoader

SETTINGS = dict(batch_size=6, episode_pool_size="all", device="cpu", num_workers=2, image_dtype="uint8", seed=4,
                delta_timestamps={"observation.images.front": [-0.1, 0.0], "action": [0.0, 0.1]})
KEYS = ("index", "observation.images.front", "observation.images.top", "action", "action_is_pad")


def batches(loader, n):
    return [{k: b[k].numpy() for k in KEYS} for _, b in zip(range(n), loader)]


@pytest.mark.parametrize("cache_bytes", [None, 64 << 10], ids=["fits", "over"])
def test_an_epoch_draws_every_frame_once_from_everywhere(small_dataset, cache_bytes):
    """Where the rank's episodes fit in half of cache_bytes each is fetched whole once, and a batch's clips of a
    camera are joined into one stream (one decoder a batch, not one per episode); where they do not, no episode is
    fetched whole: every sample reads its GOPs alone."""
    settings = {**SETTINGS, "drop_last": False, "decode": "cpu", **({"cache_bytes": cache_bytes} if cache_bytes else {})}
    with StreamLoader(str(small_dataset), **settings) as loader:
        got = np.concatenate([b["index"] for b in batches(loader, len(loader))])
        total, episodes = int(loader.meta.total_frames), loader.meta.num_episodes
        stats = loader.stats()["fetch"]
        if cache_bytes is None:
            assert stats["segments_cut"] == 2 * episodes and stats["pieces_cut"] == 0, stats
            opened = loader.stats()["decoders"]["opened"]
            assert opened <= 2 * len(loader), opened
        else:
            assert stats["segments_cut"] == 0 and stats["pieces_cut"] >= 2 * total, stats
    assert sorted(got.tolist()) == list(range(total))
    assert got.tolist() != sorted(got.tolist())


def test_resume_mid_epoch_is_exact(small_dataset):
    with StreamLoader(str(small_dataset), **SETTINGS) as whole_run:
        want = batches(whole_run, 9)
    with StreamLoader(str(small_dataset), **SETTINGS) as first:
        batches(first, 5)
        state = json.loads(json.dumps(first.state_dict()))
    assert state["episode_pool_size"] == "all"
    with StreamLoader(str(small_dataset), **SETTINGS) as resumed:
        resumed.load_state_dict(state)
        got = batches(resumed, 4)
    for a, b in zip(want[5:], got):
        assert all((a[k] == b[k]).all() for k in KEYS)
    with StreamLoader(str(small_dataset), **{**SETTINGS, "episode_pool_size": 4}) as pooled:
        with pytest.raises(StateError, match="episode_pool_size='all' but this loader has episode_pool_size=4"):
            pooled.load_state_dict(state)


@pytest.mark.parametrize("value", [0, -1, "global", 2.5, True])
def test_the_setting_is_a_positive_integer_or_all(value):
    with pytest.raises(ConfigError, match=r"`episode_pool_size` must be a positive integer or 'all' \(a global "
                                          rf"shuffle\). Found: {value!r}"):
        LoaderConfig(episode_pool_size=value)


def test_the_command_line_takes_all():
    import argparse

    from dali_stream.tools.flags import add_loader_flags

    ap = argparse.ArgumentParser()
    add_loader_flags(ap, ["episode_pool_size"])
    assert ap.parse_args(["--pool", "all"]).episode_pool_size == "all"
    assert ap.parse_args(["--pool", "32"]).episode_pool_size == 32
    with pytest.raises(SystemExit):
        ap.parse_args(["--pool", "many"])
