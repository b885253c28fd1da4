"""The planner over a mixture's episodes (`plan.mixture_epoch`): weights, epoch size, per-member windows. No files."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from dali_stream.errors import ConfigError
from dali_stream.plan.epoch import EpochPlan, PlanConfig, consumed_by, resume_plan
from dali_stream.plan.mixture_epoch import Mix, draws, member_targets, quotas
from dali_stream.plan.world import World

# member 0: 6 long episodes (240 frames); member 1: 4 short ones (40 frames); member 2: 5 episodes (100 frames)
LENGTHS = np.array([30, 50, 40, 20, 60, 40, 9, 11, 12, 8, 20, 20, 20, 20, 20], dtype=np.int64)
MEMBER_OF = np.array([0] * 6 + [1] * 4 + [2] * 5)
FRAMES = np.bincount(MEMBER_OF, weights=LENGTHS).astype(int)


def draws_of(plan):
    out = []
    for i in range(len(plan)):
        b = plan.batch(i)
        out += list(zip(b.episodes.tolist(), b.frames.tolist()))
    return out


def test_unweighted_mixture_is_the_concatenation():
    """Weights all equal and no epoch size: the plans are those of one dataset of the members' episodes."""
    cfg = PlanConfig(batch_size=7, pool_size=4, seed=3, drop_last=False, delta_indices={"a": (-1, 0, 2)})
    mix = Mix(MEMBER_OF, (2.0, 2.0, 2.0))
    for world_size in (1, 2):
        for rank in range(world_size):
            a = EpochPlan(LENGTHS, cfg, World(rank=rank, world_size=world_size), 1)
            b = EpochPlan(LENGTHS, cfg, World(rank=rank, world_size=world_size), 1, mix=mix)
            assert draws_of(a) == draws_of(b)


def test_member_targets_follow_frames_times_weight():
    targets = member_targets(FRAMES, (1.0, 3.0, 0.5), int(FRAMES.sum()))
    assert targets.sum() == FRAMES.sum()
    exact = FRAMES.sum() * FRAMES * np.array([1.0, 3.0, 0.5]) / (FRAMES * np.array([1.0, 3.0, 0.5])).sum()
    assert np.all(np.abs(targets - exact) < 1)
    assert member_targets(FRAMES, (1.0, 1.0, 1.0), int(FRAMES.sum())).tolist() == FRAMES.tolist()
    assert member_targets(np.array([0, 10]), (5.0, 1.0), 7).tolist() == [0, 7]


@pytest.mark.parametrize("seed,epoch", [(0, 0), (3, 5)])
def test_quotas_spread_each_target_over_its_episodes(seed, epoch):
    """Each episode draws the floor or ceiling of its member's target times its share of the member's frames."""
    mix = Mix(MEMBER_OF, (1.0, 4.0, 0.3))
    q = quotas(LENGTHS, mix, seed, epoch)
    targets = member_targets(FRAMES, mix.weights, int(FRAMES.sum()))
    for m in range(3):
        sel = MEMBER_OF == m
        assert q[sel].sum() == targets[m]
        expected = LENGTHS[sel] * targets[m] / FRAMES[m]
        assert np.all(q[sel] >= np.floor(expected)) and np.all(q[sel] <= np.ceil(expected))


def test_draws_repeat_whole_frames_or_subsample_without_repeats():
    frames = np.arange(3, 13)
    up = draws(frames, 27, 0, 1, 4)  # 2 whole passes + 7 distinct frames once more
    counts = Counter(up.tolist())
    assert len(up) == 27 and set(counts) == set(frames.tolist())
    assert sorted(Counter(counts.values()).items()) == [(2, 3), (3, 7)]
    down = draws(frames, 4, 0, 1, 4)
    assert len(down) == 4 and len(set(down.tolist())) == 4 and set(down.tolist()) <= set(frames.tolist())
    assert np.array_equal(down, draws(frames, 4, 0, 1, 4)), "a pure function of (seed, epoch, position)"
    assert not np.array_equal(down, draws(frames, 4, 0, 2, 4)) or not np.array_equal(down, draws(frames, 4, 0, 3, 4))


def test_member_targets_follow_shares_whatever_the_frames():
    """Shares are the parts of the epoch themselves: 5/3/2 over members of 240, 40 and 100 frames is 50/30/20 %."""
    total = int(FRAMES.sum())
    targets = member_targets(FRAMES, (1.0, 1.0, 1.0), total, shares=(5.0, 3.0, 2.0))
    assert targets.sum() == total and np.all(np.abs(targets - total * np.array([0.5, 0.3, 0.2])) < 1)
    assert member_targets(FRAMES, (1.0,) * 3, 100, shares=(0.5, 0.3, 0.2)).tolist() == [50, 30, 20]
    assert member_targets(np.array([0, 10, 5]), (1.0,) * 3, 10, shares=(0.8, 0.1, 0.1)).tolist() == [0, 5, 5]


@pytest.mark.parametrize("pool", [5, None])
def test_an_epoch_draws_each_members_share(pool):
    """One rank, drop_last=False: the epoch's draws per member are the shares of samples_per_epoch exactly; the
    40-frame member given 30 % of 400 samples repeats each of its frames three times."""
    mix = Mix(MEMBER_OF, (1.0, 1.0, 1.0), 400, shares=(0.5, 0.3, 0.2))
    assert mix.reweights
    plan = EpochPlan(LENGTHS, PlanConfig(batch_size=8, pool_size=pool, seed=2, drop_last=False), World(), 0, mix=mix)
    got = draws_of(plan)
    assert np.bincount([MEMBER_OF[e] for e, _ in got], minlength=3).tolist() == [200, 120, 80]
    counts = Counter(got)
    assert {counts[(e, f)] for e in np.flatnonzero(MEMBER_OF == 1) for f in range(LENGTHS[e])} == {3}


@pytest.mark.parametrize("pool", [5, None])
@pytest.mark.parametrize("samples_per_epoch", [None, 150, 900])
def test_epoch_shares_follow_the_weights(samples_per_epoch, pool):
    """One rank, drop_last=False: the epoch draws exactly each member's target; a member smaller than its share
    repeats frames (each whole times, some once more), a larger one draws no frame twice."""
    weights = (1.0, 6.0, 0.25)
    mix = Mix(MEMBER_OF, weights, samples_per_epoch)
    cfg = PlanConfig(batch_size=8, pool_size=pool, seed=2, drop_last=False)
    plan = EpochPlan(LENGTHS, cfg, World(), 0, mix=mix)
    got = draws_of(plan)
    total = samples_per_epoch or int(LENGTHS.sum())
    assert len(got) == total == plan.num_frames
    per_member = np.bincount([MEMBER_OF[e] for e, _ in got], minlength=3)
    assert per_member.tolist() == member_targets(FRAMES, weights, total).tolist()
    counts = Counter(got)
    for m in range(3):
        frames = {(e, f) for e in np.flatnonzero(MEMBER_OF == m) for f in range(LENGTHS[e])}
        times = [counts.get(x, 0) for x in frames]
        if per_member[m] >= FRAMES[m]:  # repeats: every frame, each floor or ceil of the ratio
            assert min(times) >= per_member[m] // FRAMES[m] and max(times) - min(times) <= 1
        else:  # subsampled: never twice
            assert max(times) <= 1


def test_weighted_epochs_differ_and_repeat_on_the_same_seed():
    mix = Mix(MEMBER_OF, (1.0, 0.2, 1.0))
    cfg = PlanConfig(batch_size=8, pool_size=5, seed=2)
    assert draws_of(EpochPlan(LENGTHS, cfg, World(), 0, mix=mix)) == draws_of(EpochPlan(LENGTHS, cfg, World(), 0, mix=mix))
    subset0 = {x for x in draws_of(EpochPlan(LENGTHS, cfg, World(), 0, mix=mix)) if MEMBER_OF[x[0]] == 1}
    subset1 = {x for x in draws_of(EpochPlan(LENGTHS, cfg, World(), 1, mix=mix)) if MEMBER_OF[x[0]] == 1}
    assert subset0 != subset1, "a subsampled member draws other frames each epoch"


@pytest.mark.parametrize("pool", [3, None])
@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_hold_disjoint_episodes_and_the_whole_epoch(world_size, pool):
    mix = Mix(MEMBER_OF, (1.0, 5.0, 0.5))
    cfg = PlanConfig(batch_size=4, pool_size=pool, seed=6, drop_last=False)
    owned, drawn = [], Counter()
    for rank in range(world_size):
        plan = EpochPlan(LENGTHS, cfg, World(rank=rank, world_size=world_size), 2, mix=mix)
        own = draws_of(plan)[:plan.num_frames]  # the rest pads with repeats of its own draws
        owned.append({e for e, _ in own})
        drawn.update(own)
    for a in range(world_size):
        for b in range(a + 1, world_size):
            assert owned[a].isdisjoint(owned[b])
    single = Counter(draws_of(EpochPlan(LENGTHS, cfg, World(), 2, mix=mix)))
    assert drawn == single, "the ranks together make exactly the epoch's draws"


@pytest.mark.parametrize("pool", [3, None])
@pytest.mark.parametrize("chain,then", [([(2, 5)], 3), ([(3, 4)], 1), ([(2, 3), (3, 2)], 2)])
def test_weighted_elastic_resume_makes_every_draw_once(chain, then, pool):
    """Stop on W ranks, finish on W': the draws before and after add up to the epoch's draws, repeats included."""
    mix = Mix(MEMBER_OF, (1.0, 5.0, 0.5))
    cfg = PlanConfig(batch_size=4, pool_size=pool, seed=3, drop_last=False)
    drawn: Counter = Counter()
    consumed: dict = {}
    for k, (world_size, batches) in enumerate(chain):
        before = {p: m.copy() for p, m in consumed.items()}
        consumed = consumed_by(LENGTHS, cfg, world_size, 1, batches, consumed, k, mix)
        for rank in range(world_size):
            plan = EpochPlan(LENGTHS, cfg, World(rank=rank, world_size=world_size), 1, before or None, k, mix)
            for i in range(batches):
                b = plan.batch(i)
                drawn.update(zip(b.episodes.tolist(), b.frames.tolist()))
    for rank in range(then):
        plan = resume_plan(LENGTHS, cfg, World(rank=rank, world_size=then), 1, chain, mix)
        drawn.update(draws_of(plan)[:plan.num_frames])
    assert drawn == Counter(draws_of(EpochPlan(LENGTHS, cfg, World(), 1, mix=mix)))


@pytest.mark.parametrize("pool", [8, None])
def test_windows_use_each_members_offsets(pool):
    """Member 0 at 30 fps offsets (0, 3), member 1 at 10 fps (0, 1) for the same seconds; member 2 lacks the key."""
    mix = Mix(MEMBER_OF, (1.0, 1.0, 1.0), delta_indices=({"a": (0, 3)}, {"a": (0, 1)}, {"a": None}))
    cfg = PlanConfig(batch_size=10, pool_size=pool, seed=1, drop_last=False, delta_indices={"a": (0, 3)})
    plan = EpochPlan(LENGTHS, cfg, World(), 0, mix=mix)
    seen = set()
    for i in range(len(plan)):
        b = plan.batch(i)
        w = b.windows["a"]
        for j, (e, f) in enumerate(zip(b.episodes.tolist(), b.frames.tolist())):
            m = int(MEMBER_OF[e])
            seen.add(m)
            if m == 2:
                assert w.is_pad[j].all() and (w.rows[j] == 0).all()
                continue
            step = 3 if m == 0 else 1
            assert w.rows[j].tolist() == [f, min(f + step, LENGTHS[e] - 1)]
            assert w.is_pad[j].tolist() == [False, f + step >= LENGTHS[e]]
    assert seen == {0, 1, 2}


def test_evaluation_pass_ignores_weights():
    mix = Mix(MEMBER_OF, (1.0, 5.0, 0.5), 77)
    cfg = PlanConfig(batch_size=6, pool_size=3, seed=0, drop_last=False, shuffle=False)
    got = draws_of(EpochPlan(LENGTHS, cfg, World(), 0, mix=mix))
    assert got == [(e, f) for e in range(len(LENGTHS)) for f in range(LENGTHS[e])], "member by member, in order"


@pytest.mark.parametrize("kwargs,match", [
    ({"weights": ()}, "at least one member"),
    ({"weights": (1.0, 0.0, 1.0)}, "weights must be finite numbers > 0"),
    ({"weights": (1.0, float("nan"), 1.0)}, "weights must be finite"),
    ({"weights": (1.0, 1.0, 1.0), "samples_per_epoch": 0}, "samples_per_epoch"),
    ({"weights": (1.0, 1.0)}, "outside 0..1"),
])
def test_mix_checks(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Mix(MEMBER_OF, **kwargs)
