"""The planner alone: no files, no decoders."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from dali_stream.errors import ConfigError
from dali_stream.plan.epoch import (
    EpochPlan,
    PlanConfig,
    delta_indices,
    window,
)
from dali_stream.plan.partition import partition_episodes
from dali_stream.plan.world import World

LENGTHS = np.array([30, 5, 0, 48, 17, 22, 60, 9, 41, 12, 33, 27, 50, 8, 19, 25], dtype=np.int64)


def epoch_samples(lengths, cfg, world, epoch):
    plan = EpochPlan(lengths, cfg, world, epoch)
    pairs = []
    for i in range(len(plan)):
        b = plan.batch(i)
        pairs += list(zip(b.episodes.tolist(), b.frames.tolist()))
    return plan, pairs


def all_frames(lengths, episodes=None):
    eps = range(len(lengths)) if episodes is None else episodes
    return {(int(e), f) for e in eps for f in range(int(lengths[e]))}


def test_every_frame_exactly_once_without_drop_last():
    cfg = PlanConfig(batch_size=7, pool_size=4, seed=3, drop_last=False)
    plan, pairs = epoch_samples(LENGTHS, cfg, World(), 0)
    assert len(pairs) == LENGTHS.sum() == plan.num_frames
    assert set(pairs) == all_frames(LENGTHS)
    assert max(Counter(pairs).values()) == 1
    assert plan.batch(len(plan) - 1).size == (int(LENGTHS.sum()) % 7 or 7)


def test_drop_last_drops_only_the_partial_tail():
    cfg = PlanConfig(batch_size=7, pool_size=4, seed=3, drop_last=True)
    plan, pairs = epoch_samples(LENGTHS, cfg, World(), 0)
    assert len(plan) == LENGTHS.sum() // 7
    assert len(pairs) == len(set(pairs)) == len(plan) * 7


def test_same_seed_same_plans_other_seed_or_epoch_differs():
    cfg = PlanConfig(batch_size=8, pool_size=5, seed=11)
    _, a = epoch_samples(LENGTHS, cfg, World(), 2)
    _, b = epoch_samples(LENGTHS, cfg, World(), 2)
    _, c = epoch_samples(LENGTHS, PlanConfig(batch_size=8, pool_size=5, seed=12), World(), 2)
    _, d = epoch_samples(LENGTHS, cfg, World(), 3)
    assert a == b
    assert a != c and a != d
    assert set(a[: len(a) // 2]) != set(d[: len(d) // 2])  # the epoch reshuffles, not just reorders batches


def test_random_access_equals_sequential():
    cfg = PlanConfig(batch_size=6, pool_size=3, seed=5)
    seq = EpochPlan(LENGTHS, cfg, World(), 1)
    batches = [seq.batch(i) for i in range(len(seq))]
    jump = EpochPlan(LENGTHS, cfg, World(), 1)
    for i in (40, 3, len(jump) - 1, 0):
        assert np.array_equal(jump.batch(i).episodes, batches[i].episodes)
        assert np.array_equal(jump.batch(i).frames, batches[i].frames)


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_ranks_are_disjoint_and_cover_the_epoch(world_size):
    """Without drop_last: equal batch counts, own frames exactly once, then padding repeats of own frames."""
    cfg = PlanConfig(batch_size=4, pool_size=3, seed=0, drop_last=False)
    own, counts, sizes = [], set(), []
    for rank in range(world_size):
        plan, pairs = epoch_samples(LENGTHS, cfg, World(rank=rank, world_size=world_size), 0)
        counts.add(len(plan))
        sizes.append([plan.batch(i).size for i in range(len(plan))])
        first = pairs[:plan.num_frames]  # the rank's own frames come first, once each
        assert len(first) == len(set(first))
        assert set(pairs[plan.num_frames:]) <= set(first)  # padding repeats the rank's own frames
        assert len(pairs) - plan.num_frames == plan.num_padding
        own.append(set(first))
    assert len(counts) == 1 and len({tuple(s) for s in sizes}) == 1, "every rank yields the same batches"
    union = set().union(*own)
    assert sum(len(s) for s in own) == len(union), "ranks are disjoint"
    assert union == all_frames(LENGTHS)


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_drop_last_ranks_stop_together_without_repeats(world_size):
    cfg = PlanConfig(batch_size=4, pool_size=3, seed=1, drop_last=True)
    plans, seen = [], []
    for rank in range(world_size):
        plan, pairs = epoch_samples(LENGTHS, cfg, World(rank=rank, world_size=world_size), 2)
        plans.append(plan)
        assert len(pairs) == len(set(pairs)) == len(plan) * 4
        seen.append(set(pairs))
    assert len({len(p) for p in plans}) == 1
    assert sum(len(s) for s in seen) == len(set().union(*seen))
    dropped = int(LENGTHS.sum()) - sum(len(s) for s in seen)
    assert dropped <= world_size * 4 + (max(p.num_frames for p in plans) - min(p.num_frames for p in plans)) * world_size


def test_partition_balances_frames_and_is_whole_episodes():
    parts = partition_episodes(LENGTHS, 3, seed=0, epoch=0)
    loads = [int(LENGTHS[p].sum()) for p in parts]
    assert max(loads) - min(loads) <= LENGTHS.max()
    assert sorted(np.concatenate(parts).tolist()) == [i for i in range(len(LENGTHS)) if LENGTHS[i] > 0]


def test_more_ranks_than_episodes_is_a_clear_error():
    with pytest.raises(ConfigError, match="world_size=20 ranks but the dataset has only 15 non-empty episodes"):
        EpochPlan(LENGTHS, PlanConfig(batch_size=4, pool_size=2), World(rank=0, world_size=20), 0)


@pytest.mark.parametrize("pool", [16, 32])
def test_pool_spreads_a_batch_over_distinct_episodes(pool):
    lengths = np.full(200, 50, dtype=np.int64)
    plan = EpochPlan(lengths, PlanConfig(batch_size=16, pool_size=pool, seed=1), World(), 0)
    fracs = [len(set(plan.batch(i).episodes.tolist())) / 16 for i in range(len(plan))]
    assert np.mean(fracs) >= 0.9
    # Until the admission list runs dry (the last pool's worth of frames), every batch is spread out.
    steady = fracs[: len(plan) - pool * 50 // 16]
    assert min(steady) >= 0.9


def test_pool_keeps_few_episodes_open():
    lengths = np.full(40, 20, dtype=np.int64)
    plan = EpochPlan(lengths, PlanConfig(batch_size=4, pool_size=3, seed=2), World(), 0)
    open_eps, done, worst = set(), Counter(), 0
    for i in range(len(plan)):
        b = plan.batch(i)
        for e in b.episodes.tolist():
            open_eps.add(e)
            done[e] += 1
            if done[e] == 20:
                open_eps.discard(e)
            worst = max(worst, len(open_eps))
    assert worst <= 3


def test_window_clamps_and_pads_at_both_ends():
    w = window(np.array([0, 1, 9]), np.array([10, 10, 10]), (-2, -1, 0, 1, 2))
    assert w.rows.tolist() == [[0, 0, 0, 1, 2], [0, 0, 1, 2, 3], [7, 8, 9, 9, 9]]
    assert w.is_pad.tolist() == [[True, True, False, False, False], [True, False, False, False, False],
                                 [False, False, False, True, True]]


def test_batch_plan_windows_follow_delta_indices():
    cfg = PlanConfig(batch_size=5, pool_size=2, seed=0, delta_indices={"action": (0, 1, 2), "cam": (-1, 0)})
    b = EpochPlan(LENGTHS, cfg, World(), 0).batch(0)
    for j in range(b.size):
        L = LENGTHS[b.episodes[j]]
        f = b.frames[j]
        assert b.windows["action"].rows[j].tolist() == [min(f + d, L - 1) for d in (0, 1, 2)]
        assert b.windows["cam"].is_pad[j].tolist() == [f == 0, False]


def test_delta_timestamps_must_be_multiples_of_the_frame_period():
    assert delta_indices({"a": [-1 / 30, 0.0, 0.5]}, 30, 1e-4) == {"a": (-1, 0, 15)}
    with pytest.raises(ConfigError, match=r"delta_timestamps\['a'\].*\[0\.01\]"):
        delta_indices({"a": [0.0, 0.01]}, 30, 1e-4)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0, "pool_size": 4}, "`batch_size` must be a positive integer. Found: 0"),
    ({"batch_size": 4, "pool_size": -1}, "`episode_pool_size` must be a positive integer or None (a global shuffle). Found: -1"),
    ({"batch_size": 4, "pool_size": 2, "seed": -3}, "`seed` must be a non-negative integer. Found: -3"),
])
def test_bad_sizes_are_clear_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PlanConfig(**kwargs)


@pytest.mark.parametrize("pool", [3, None], ids=["pool", "global"])
@pytest.mark.parametrize("chain,then", [([(2, 5)], 3), ([(3, 4)], 2), ([(1, 9)], 2), ([(2, 3), (3, 2)], 2)])
def test_elastic_resume_keeps_exactly_once(chain, then, pool):
    """Stop after some batches on W ranks (maybe twice), finish the epoch on W' ranks: no frame lost or repeated;
    with a pool and with a global shuffle (pool None)."""
    from dali_stream.plan.epoch import consumed_by, resume_plan

    cfg = PlanConfig(batch_size=4, pool_size=pool, seed=3, drop_last=False)
    drawn: list[tuple[int, int]] = []
    consumed: dict = {}
    for k, (world_size, batches) in enumerate(chain):
        before = {p: m.copy() for p, m in consumed.items()}
        consumed = consumed_by(LENGTHS, cfg, world_size, 1, batches, consumed, k)
        for rank in range(world_size):
            plan = EpochPlan(LENGTHS, cfg, World(rank=rank, world_size=world_size), 1, before or None, k)
            for i in range(batches):
                b = plan.batch(i)
                drawn += list(zip(b.episodes.tolist(), b.frames.tolist()))
    assert len(drawn) == len(set(drawn)), "segments before the switch draw distinct frames (no padding yet)"
    rest = []
    counts = set()
    for rank in range(then):
        plan = resume_plan(LENGTHS, cfg, World(rank=rank, world_size=then), 1, chain)
        counts.add(len(plan))
        _, pairs = epoch_samples_of(plan)
        rest.append(pairs[:plan.num_frames])  # own frames; the rest is padding of those
        assert set(pairs[plan.num_frames:]) <= set(pairs[:plan.num_frames])
    own = [p for r in rest for p in r]
    assert len(own) == len(set(own)), "no frame twice after the switch"
    assert set(own).isdisjoint(drawn), "nothing drawn before the switch is drawn again"
    assert set(own) | set(drawn) == all_frames(LENGTHS), "no frame lost"
    assert len(counts) == 1


def epoch_samples_of(plan):
    pairs = []
    for i in range(len(plan)):
        b = plan.batch(i)
        pairs += list(zip(b.episodes.tolist(), b.frames.tolist()))
    return plan, pairs


def test_resume_plan_without_chain_is_the_epoch_plan():
    from dali_stream.plan.epoch import resume_plan

    cfg = PlanConfig(batch_size=4, pool_size=3, seed=3)
    a = resume_plan(LENGTHS, cfg, World(rank=1, world_size=2), 0, [])
    b = EpochPlan(LENGTHS, cfg, World(rank=1, world_size=2), 0)
    assert all(np.array_equal(a.batch(i).frames, b.batch(i).frames) for i in range(len(b)))


@pytest.mark.parametrize("world_size, drop_last", [(1, False), (3, False), (3, True)])
def test_admissions_and_retirements_bracket_every_draw(world_size, drop_last):
    """The plan's pool moves (what prefetch pins and releases): an episode is drawn only between the batch
    that admits it and the one that retires it; it retires in the batch that draws its last frame; the
    pool never holds more than pool_size; padding passes admit episodes again only after retiring them."""
    cfg = PlanConfig(batch_size=5, pool_size=3, seed=7, drop_last=drop_last)
    for rank in range(world_size):
        plan = EpochPlan(LENGTHS, cfg, World(rank=rank, world_size=world_size), 2)
        live: set[int] = set()
        drawn: Counter = Counter()
        for i in range(len(plan)):
            b = plan.batch(i)
            assert live == set(plan.pool_before(i))
            assert not live & set(b.admitted), "admitted twice without retiring"
            live |= set(b.admitted)
            assert set(b.episodes.tolist()) <= live
            assert len(live) <= cfg.pool_size + len(b.retired)
            drawn.update(b.episodes.tolist())
            for pos in b.retired:
                assert drawn[pos] % LENGTHS[pos] == 0, "retired before its last frame was drawn"
            live -= set(b.retired)
        assert len(live) <= cfg.pool_size
        if not drop_last and world_size == 1:
            assert not live, "an epoch over all frames ends with an empty pool"


# ---- lerobot's habits: frame trimming, evaluation order, episode subsets ------------------------------------
def _trimmed(lengths, first, last, episodes=None):
    eps = range(len(lengths)) if episodes is None else episodes
    return {(int(e), f) for e in eps for f in range(first, max(first, int(lengths[e]) - last))}


@pytest.mark.parametrize("world_size", [1, 3])
def test_dropped_first_and_last_frames_are_never_drawn(world_size):
    cfg = PlanConfig(batch_size=4, pool_size=3, seed=4, drop_last=False, drop_n_first_frames=2, drop_n_last_frames=6,
                     delta_indices={"action": (0, 1, 2, 3)})
    own = []
    for rank in range(world_size):
        plan, pairs = epoch_samples(LENGTHS, cfg, World(rank=rank, world_size=world_size), 0)
        own += pairs[:plan.num_frames]
        windows = [plan.batch(i).windows["action"] for i in range(len(plan))]
        assert max(int(w.rows.max()) for w in windows) > 0  # windows still reach into the trimmed frames
    assert len(own) == len(set(own)) and set(own) == _trimmed(LENGTHS, 2, 6)


def test_trimmed_elastic_resume_keeps_exactly_once():
    from dali_stream.plan.epoch import consumed_by, resume_plan

    cfg = PlanConfig(batch_size=4, pool_size=3, seed=3, drop_last=False, drop_n_first_frames=1, drop_n_last_frames=3)
    consumed = consumed_by(LENGTHS, cfg, 2, 0, 5)
    drawn = {(p, f) for p, m in consumed.items() for f in np.flatnonzero(m).tolist()}
    rest = []
    for rank in range(3):
        plan = resume_plan(LENGTHS, cfg, World(rank=rank, world_size=3), 0, [(2, 5)])
        rest += epoch_samples_of(plan)[1][:plan.num_frames]
    assert len(rest) == len(set(rest)) and set(rest).isdisjoint(drawn)
    assert set(rest) | drawn == _trimmed(LENGTHS, 1, 3)


@pytest.mark.parametrize("world_size", [1, 2, 5])
def test_unshuffled_pass_is_every_frame_once_in_order(world_size):
    cfg = PlanConfig(batch_size=7, pool_size=4, seed=9, drop_last=False, shuffle=False)
    own = []
    for rank in range(world_size):
        plan, pairs = epoch_samples(LENGTHS, cfg, World(rank=rank, world_size=world_size), 3)
        mine = pairs[:plan.num_frames]
        assert mine == sorted(mine), "episodes in order, frames in order"
        own += mine
    assert own == sorted(own) and own == sorted(all_frames(LENGTHS)), "ranks hold contiguous blocks, no overlap"
    again = epoch_samples(LENGTHS, cfg, World(rank=0, world_size=world_size), 4)[1]
    assert again == epoch_samples(LENGTHS, cfg, World(rank=0, world_size=world_size), 3)[1], "same every epoch"


def test_an_episode_subset_is_planned_by_zero_lengths():
    """The loader plans `episodes=[...]` by zeroing the others' lengths: they are never drawn."""
    keep = [0, 3, 4, 9, 12]
    lengths = np.where(np.isin(np.arange(len(LENGTHS)), keep), LENGTHS, 0)
    _, pairs = epoch_samples(lengths, PlanConfig(batch_size=5, pool_size=2, seed=1, drop_last=False), World(), 0)
    assert set(pairs) == all_frames(LENGTHS, keep)


@pytest.mark.parametrize("kwargs,match", [({"drop_n_first_frames": -1}, "drop_n_first_frames"),
                                          ({"drop_n_last_frames": 1.5}, "drop_n_last_frames"),
                                          ({"shuffle": "no"}, "shuffle")])
def test_bad_trimming_and_shuffle_values(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        PlanConfig(batch_size=2, pool_size=2, **kwargs)


@pytest.mark.parametrize("drop_last", [True, False])
def test_any_batch_is_computed_on_its_own_as_the_sequential_plan_gives_it(drop_last):
    """Resume in constant time. A batch (and the pool before it) comes out of a fresh plan, asked in any
    order, as a plan read from the start gives it, padding passes included (the smallest of three uneven shares
    without drop_last); a plan keeps no per-batch state, whatever it was asked."""
    lengths = np.concatenate([np.tile(LENGTHS, 6), [7]])  # shares that cannot be equal
    cfg = PlanConfig(batch_size=3, pool_size=4, seed=9, drop_last=drop_last)
    sizes = EpochPlan(lengths, cfg, World(rank=0, world_size=3), 2).share_sizes
    world = World(rank=int(np.argmin(sizes)), world_size=3)  # the smallest share: padded without drop_last
    full = EpochPlan(lengths, cfg, world, 2)
    want = [full.batch(i) for i in range(len(full))]
    pools = [full.pool_before(i) for i in range(len(full))]
    assert len(full) > 30 and (drop_last or full.num_padding > 0)
    for i in [len(full) - 1, 3, 0, 17, len(full) // 2, 5]:
        fresh = EpochPlan(lengths, cfg, world, 2)
        b = fresh.batch(i)
        assert (b.episodes.tolist(), b.frames.tolist(), b.admitted, b.retired) == (
            want[i].episodes.tolist(), want[i].frames.tolist(), want[i].admitted, want[i].retired), i
        assert sorted(EpochPlan(lengths, cfg, world, 2).pool_before(i)) == sorted(pools[i]), i
        assert len(fresh._passes) <= 2  # the pass's lanes (and pass 0's): nothing per batch


@pytest.mark.parametrize("world_size, drop_last", [(1, True), (3, False), (2, True)])
def test_frames_drawn_in_closed_form_are_the_batches_frames(world_size, drop_last):
    """Elastic resume's replay (`consumed_by`) reads what each rank drew from the plans' closed form: the same
    frames as its batches hold, at every cut (padding passes counted once)."""
    lengths = np.concatenate([LENGTHS, [7, 3]])
    cfg = PlanConfig(batch_size=4, pool_size=3, seed=5, drop_last=drop_last)
    for rank in range(world_size):
        plan = EpochPlan(lengths, cfg, World(rank=rank, world_size=world_size), 1)
        seen: dict[int, set] = {}
        for cut in range(len(plan) + 1):
            got = {p: sorted(set(f.tolist())) for p, f in plan.frames_drawn(cut).items()}
            assert got == {p: sorted(f) for p, f in seen.items()}, (rank, cut)
            if cut < len(plan):
                b = plan.batch(cut)
                for p, f in zip(b.episodes.tolist(), b.frames.tolist()):
                    seen.setdefault(p, set()).add(f)


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_pass_span_is_what_each_position_gives(shuffle):
    """`Lanes.span` finds a batch's samples for all its positions at once: the same (episode, frame, place) as
    `Lanes.at` position after position, over pools of 1 to 20 lanes, episodes without frames among them, spans
    anywhere in the pass (lanes running dry at different times)."""
    from dali_stream.plan.passes import Lanes

    rng = np.random.default_rng(5)
    for _ in range(60):
        counts = [int(c) for c in rng.integers(0, 40, size=int(rng.integers(1, 30)))]
        if not any(counts):
            continue
        lanes = Lanes(counts, lambda e: np.arange(counts[e]), int(rng.integers(1, 21)), shuffle, (3, 1))
        v = int(rng.integers(0, lanes.frames))
        stop = int(rng.integers(v + 1, lanes.frames + 1))
        want: tuple[list, list, list] = ([], [], [])
        n = lanes.stream_index(v)
        while len(want[0]) < stop - v:
            at = lanes.at(n)
            n += 1
            if at is not None:
                want[0].append(at[0])
                want[1].append(at[2])
                want[2].append(at[1])
        assert lanes.span(v, stop) == want


NODE_LENGTHS = np.random.default_rng(11).integers(5, 60, size=64)


def _node_epoch(cfg, nodes, per_node, epoch):
    """{node: set of episodes its ranks drew}, {rank: set of episodes}, and all (episode, frame) pairs drawn."""
    by_node: dict = {}
    by_rank: dict = {}
    pairs = []
    for rank in range(nodes * per_node):
        world = World(rank=rank, world_size=nodes * per_node, local_world_size=per_node, node_rank=rank // per_node)
        plan, got = epoch_samples(NODE_LENGTHS, cfg, world, epoch)
        own = got[:plan.num_frames]
        pairs += own
        by_rank[rank] = {e for e, _ in own}
        by_node.setdefault(rank // per_node, set()).update(by_rank[rank])
    return by_node, by_rank, pairs


@pytest.mark.parametrize("pool", [3, None], ids=["pool", "global"])
def test_node_partition_keeps_each_nodes_share_across_epochs(pool):
    """Four nodes of two ranks, three epochs: each node's ranks draw the same episodes every epoch, the nodes'
    shares are disjoint and cover the dataset, the split between a node's two ranks changes, every frame once."""
    cfg = PlanConfig(batch_size=4, pool_size=pool, seed=5, drop_last=False, partition="node")
    epochs = [_node_epoch(cfg, 4, 2, e) for e in range(3)]
    shares = epochs[0][0]
    assert [len(shares[n]) for n in range(4)] and set().union(*shares.values()) == set(range(len(NODE_LENGTHS)))
    assert sum(len(v) for v in shares.values()) == len(NODE_LENGTHS), "a node's share is its own"
    for by_node, _, pairs in epochs:
        assert by_node == shares, "each node keeps its episodes"
        assert len(pairs) == len(set(pairs)) and set(pairs) == all_frames(NODE_LENGTHS), "every frame once"
    assert any(epochs[0][1][r] != epochs[1][1][r] or epochs[1][1][r] != epochs[2][1][r] for r in range(8)), \
        "a node's ranks split its share afresh"
    frames = [sum(int(NODE_LENGTHS[e]) for e in shares[n]) for n in range(4)]
    assert max(frames) - min(frames) <= max(NODE_LENGTHS), "nodes balanced by frames"
    by_rank = PlanConfig(batch_size=4, pool_size=pool, seed=5, drop_last=False)
    assert _node_epoch(by_rank, 4, 2, 1)[0] != _node_epoch(by_rank, 4, 2, 2)[0], "partition='rank' moves episodes"


def test_node_partition_elastic_resume_on_two_nodes_is_exact():
    """Five batches on four nodes of two ranks, the rest of the epoch on two nodes of two: no frame lost or
    repeated; on two nodes, each node's ranks draw only that node's share of the two-node split."""
    from dali_stream.plan.epoch import consumed_by, resume_plan

    cfg = PlanConfig(batch_size=4, pool_size=3, seed=5, drop_last=False, partition="node")
    drawn = []
    for rank in range(8):
        plan = EpochPlan(NODE_LENGTHS, cfg, World(rank=rank, world_size=8, local_world_size=2), 1)
        for i in range(5):
            b = plan.batch(i)
            drawn += list(zip(b.episodes.tolist(), b.frames.tolist()))
    consumed = consumed_by(NODE_LENGTHS, cfg, 8, 1, 5, ranks_per_node=2)
    assert sum(int(m.sum()) for m in consumed.values()) == len(drawn) == len(set(drawn))
    rest, by_node = [], {}
    for rank in range(4):
        plan = resume_plan(NODE_LENGTHS, cfg, World(rank=rank, world_size=4, local_world_size=2), 1, [(8, 5, 2)])
        _, pairs = epoch_samples_of(plan)
        rest += pairs[:plan.num_frames]
        by_node.setdefault(rank // 2, set()).update(e for e, _ in pairs[:plan.num_frames])
    assert len(rest) == len(set(rest)) and set(rest).isdisjoint(drawn)
    assert set(rest) | set(drawn) == all_frames(NODE_LENGTHS)
    two_nodes = _node_epoch(cfg, 2, 2, 2)[0]
    assert all(by_node[n] <= two_nodes[n] for n in range(2)), "the rest of the epoch stays on the new nodes' shares"


def test_node_partition_needs_whole_nodes():
    cfg = PlanConfig(batch_size=4, pool_size=3, seed=5, partition="node")
    with pytest.raises(ConfigError, match="multiple of the ranks on this node"):
        EpochPlan(NODE_LENGTHS, cfg, World(rank=0, world_size=6, local_world_size=4), 0)
    with pytest.raises(ConfigError, match="partition"):
        PlanConfig(batch_size=4, pool_size=3, partition="cluster")


def test_windows_in_frames_are_told_apart_from_windows_in_seconds():
    """Whole numbers beyond 1 at fps > 1 look like frame counts: a warning, saying where every sample would pad some
    step; windows in seconds, and [0, 1], say nothing."""
    from dali_stream.plan.epoch import frame_counts

    frames = frame_counts("action", [float(k) for k in range(8)], 30, 20)
    assert frames is not None and "every sample pads them" in frames
    assert frames.startswith("delta_timestamps['action'] = [0, 1, ..., 7] look like frame counts: they are "
                                     "seconds in lerobot's convention (k / fps); at 30 fps write "
                                     "[k / 30 for k in range(8)]. Read as seconds, the steps at [1, 2, ..., 7] s lie "
                                     "past the longest episode (20 frames, 0.667 s)"), frames
    later = frame_counts("next.reward", [0.0, 2.0], 10, 200)  # now and 2 s later, within 20 s episodes
    assert later is not None and "every sample pads" not in later
    assert "at 10 fps write [k / 10 for k in range(2)]" not in later  # [0, 2] is not a range
    assert "at 10 fps write [k / 10 for k in [0, 2]]" in later and "filterwarnings" in later
    assert "range(-2, 1)" in frame_counts("obs", [-2.0, -1.0, 0.0], 30, 5)
    for seconds in ([k / 30 for k in range(8)], [0.0, 1.0], [-1.0, 0.0], [0.0, 0.5, 2.5]):
        assert frame_counts("action", seconds, 30, 20) is None, seconds
    assert frame_counts("action", [0.0, 1.0, 2.0], 1, 20) is None  # at 1 fps seconds and frames agree
