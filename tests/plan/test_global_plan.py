"""The planner's global shuffle (`pool_size=None`): no files, no decoders. Coverage, ranks and resume hold as for a
pool (elastic resume: tests/plan/test_plan.py, both ways); batches mix like a shuffled DataLoader's, which a pool's do
not."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from dali_stream.plan.epoch import EpochPlan, PlanConfig
from dali_stream.plan.permute import permute, round_keys
from dali_stream.plan.world import World
from dali_stream.tools.mixing_stats import compare, dataloader_batches, lookback, mixing
from tests.plan.test_plan import LENGTHS, all_frames, epoch_samples

MANY = np.random.default_rng(0).integers(20, 61, 2000)  # 2,000 short episodes, as in the global-shuffle benchmark


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 17, 64, 1000, 4097, 65537])
def test_permute_is_a_bijection_computed_pointwise(n):
    keys = round_keys([7, n])
    whole = permute(np.arange(n), n, keys)
    assert sorted(whole.tolist()) == list(range(n))
    picked = np.array(sorted({0, n // 3, n - 1}))
    assert permute(picked, n, keys).tolist() == whole[picked].tolist(), "an index alone maps as in the whole"
    if n >= 64:
        assert permute(np.arange(n), n, round_keys([8, n])).tolist() != whole.tolist(), "another seed, another order"
        assert abs(np.corrcoef(np.arange(n), whole)[0, 1]) < 0.2, "no trace of the input order"


@pytest.mark.parametrize("drop_last", [False, True])
def test_every_frame_exactly_once(drop_last):
    cfg = PlanConfig(batch_size=7, pool_size=None, seed=3, drop_last=drop_last)
    plan, pairs = epoch_samples(LENGTHS, cfg, World(), 0)
    assert len(pairs) == len(set(pairs))
    if drop_last:
        assert len(pairs) == len(plan) * 7 == LENGTHS.sum() // 7 * 7
    else:
        assert set(pairs) == all_frames(LENGTHS)


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_ranks_are_disjoint_cover_the_epoch_and_pad_with_their_own(world_size):
    cfg = PlanConfig(batch_size=4, pool_size=None, seed=0, drop_last=False)
    own, counts = [], set()
    for rank in range(world_size):
        plan, pairs = epoch_samples(LENGTHS, cfg, World(rank=rank, world_size=world_size), 1)
        counts.add(len(plan))
        first = pairs[:plan.num_frames]
        assert len(first) == len(set(first))
        assert set(pairs[plan.num_frames:]) <= set(first)
        own.append(set(first))
    assert len(counts) == 1
    assert sum(len(s) for s in own) == len(set().union(*own)) == int(LENGTHS.sum())


def test_same_seed_same_plans_and_each_batch_computed_on_its_own():
    cfg = PlanConfig(batch_size=5, pool_size=None, seed=9, drop_last=False)
    lengths = np.concatenate([np.tile(LENGTHS, 4), [7]])
    sizes = EpochPlan(lengths, cfg, World(rank=0, world_size=3), 2).share_sizes
    world = World(rank=int(np.argmin(sizes)), world_size=3)  # the smallest share: padded
    full = EpochPlan(lengths, cfg, world, 2)
    want = [full.batch(i) for i in range(len(full))]
    assert full.num_padding > 0, "padding passes are covered"
    for i in [len(full) - 1, 0, 11, len(full) // 2]:
        fresh = EpochPlan(lengths, cfg, world, 2)
        b = fresh.batch(i)
        assert (b.episodes.tolist(), b.frames.tolist()) == (want[i].episodes.tolist(), want[i].frames.tolist())
        assert len(fresh._passes) <= 2
    other = EpochPlan(lengths, cfg, world, 3)
    assert [other.batch(i).frames.tolist() for i in range(3)] != [want[i].frames.tolist() for i in range(3)]


def test_prefetch_pins_each_batch_and_releases_it():
    """Nothing stays open: a batch admits and retires its own episodes, and no pool stands between batches."""
    cfg = PlanConfig(batch_size=6, pool_size=None, seed=1)
    plan = EpochPlan(LENGTHS, cfg, World(), 0)
    for i in range(len(plan)):
        b = plan.batch(i)
        assert set(b.admitted) == set(b.retired) == set(b.episodes.tolist())
        assert plan.pool_before(i) == []


def test_frames_drawn_in_closed_form_are_the_batches_frames():
    lengths = np.concatenate([LENGTHS, [7, 3]])
    cfg = PlanConfig(batch_size=4, pool_size=None, seed=5, drop_last=False)
    plan = EpochPlan(lengths, cfg, World(rank=1, world_size=2), 1)
    seen: Counter = Counter()
    for cut in range(len(plan) + 1):
        got = Counter((p, int(f)) for p, fs in plan.frames_drawn(cut).items() for f in fs)
        assert got == seen, cut
        if cut < len(plan) and cut * 4 < plan.num_frames:
            b = plan.batch(cut)
            seen.update(zip(b.episodes.tolist(), b.frames.tolist()))
        elif cut < len(plan):
            break


def test_batches_mix_like_a_shuffled_dataloader_and_a_pool_does_not():
    """2,000 episodes, batch 64: the global shuffle's three mixing figures are a shuffled DataLoader's (distinct
    episodes per batch, episodes touched per 100 batches, repeats within pool/batch batches); pool 16 holds 16
    episodes a batch and turns over slowly; pool 256 holds 64 distinct episodes a batch but rotates its lanes: the
    figure over its last 4 batches says so."""
    def figures(pool):
        cfg = PlanConfig(batch_size=64, pool_size=pool, seed=0)
        plan = EpochPlan(MANY, cfg, World(), 0)
        return compare(lambda i: plan.batch(i).episodes, len(plan), MANY, pool or len(MANY), 64, 0)

    wide = figures(None)
    ours, theirs = wide["loader"], wide["shuffled_dataloader"]
    assert ours["distinct_frac"] >= 0.9 and ours["touched_per_100"] >= 0.8 * theirs["touched_per_100"]
    assert abs(ours["recent_frac"] - theirs["recent_frac"]) < 0.05
    small = figures(16)["loader"]
    assert small["distinct_frac"] <= 18 / 64 and small["touched_per_100"] < 0.1 * theirs["touched_per_100"]
    lanes = figures(256)
    assert lanes["loader"]["distinct_frac"] >= 0.9, "every sample of a batch from another episode..."
    assert lanes["loader"]["recent_frac"] > 0.95 > lanes["shuffled_dataloader"]["recent_frac"] + 0.5, \
        "...but the same episodes every 4th batch"


def test_mixing_figures_of_known_batches():
    batches = [np.array([0, 1]), np.array([2, 3]), np.array([0, 2]), np.array([4, 4])]
    got = mixing(batches, 1)
    assert got["distinct_frac"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert got["touched_per_100"] == pytest.approx(4 * 100 / 3)  # 2, 3, 0, 4 over 3 batches, scaled
    assert got["recent_frac"] == pytest.approx((0 + 0.5 + 0) / 3)
    assert lookback(2000, 64) == 32 and lookback(16, 64) == 1
    loader = dataloader_batches(np.array([3, 1]), 2, 5, 0)
    assert len(loader) == 2 and sorted(np.concatenate(loader).tolist()) == [0, 0, 0, 1]


def test_batch_mixing_of_an_epoch_of_one_batch():
    """A dataset smaller than two batches (a new user's first `bench` of a small dataset at batch 64): the figures
    are given for the one batch, with no history to compare with, not a crash."""
    import numpy as np

    from dali_stream.tools.mixing_stats import compare

    got = compare(lambda i: np.array([0, 0, 1, 2]), 1, np.array([3, 1, 1]), 16, 4, seed=0)
    assert got["lookback_batches"] == 0 and got["loader"]["distinct_frac"] == 0.75
    assert np.isnan(got["loader"]["recent_frac"])
