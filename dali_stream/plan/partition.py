"""Episodes split over ranks (`EpochPlan`'s first step): balanced by frames in a seeded order, or in order, in
contiguous blocks, for an unshuffled pass. Pure functions of the lengths, the world size and the seed words.

A shuffled epoch's split is chosen by name (`PARTITIONS`, the `partition` setting): "rank" splits every epoch's
episodes over all ranks afresh; "node" gives each node the same share every epoch (split once, by the seed and the
node count) and splits the node's share over its ranks afresh each epoch, so a node reads about 1/nodes of the
dataset, every epoch, from its own disk tier."""

from __future__ import annotations

import heapq

import numpy as np

from ..errors import ConfigError
from . import salts


def _candidates(lengths: np.ndarray, world_size: int) -> np.ndarray:
    """Positions of the episodes with frames to hand out; every rank needs at least one."""
    candidates = np.flatnonzero(lengths > 0)
    if world_size > len(candidates):
        raise ConfigError(
            f"world_size={world_size} ranks but the dataset has only {len(candidates)} non-empty episodes: "
            "every rank needs at least one episode; use fewer ranks or a larger dataset"
        )
    return candidates


def refuse_dropped_out(lengths: np.ndarray, drawable: np.ndarray, first: int, last: int, world_size: int) -> None:
    """A ConfigError naming drop_n_first_frames/drop_n_last_frames (`first`, `last`) where they, not the episodes in
    use (`lengths`), leave fewer episodes with frames to draw (`drawable`) than ranks: `_candidates` would blame the
    dataset's size."""
    left, used = int(np.count_nonzero(drawable)), int(np.count_nonzero(lengths))
    if not (first or last) or not left < world_size <= used:
        return
    longest = int(lengths.max())
    fix = f"lower them so that together they stay under {longest} frames"
    if left:
        fix += f" (an episode of at most {first + last} frames draws nothing), or use at most {left} ranks"
    ranks = "the one rank needs one" if world_size == 1 else f"each of the world_size={world_size} ranks needs one"
    raise ConfigError(
        f"drop_n_first_frames={first} and drop_n_last_frames={last} leave {left} of the {used} episodes in use a frame "
        f"to draw (the longest episode has {longest} frames), and {ranks}: {fix}")


def partition_episodes(lengths: np.ndarray, world_size: int, seed: int, epoch: int, *salt: int) -> list[np.ndarray]:
    """Split episode positions over ranks, balanced by frame count; deterministic in (seed, epoch, salt)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    candidates = _candidates(lengths, world_size)
    rng = np.random.default_rng([seed, epoch, salts.PARTITION, *salt])
    order = candidates[rng.permutation(len(candidates))]
    order = order[np.argsort(-lengths[order], kind="stable")]
    heap = [(0, r) for r in range(world_size)]
    owned: list[list[int]] = [[] for _ in range(world_size)]
    for pos in order.tolist():
        load, rank = heapq.heappop(heap)
        owned[rank].append(pos)
        heapq.heappush(heap, (load + int(lengths[pos]), rank))
    return [np.array(sorted(o), dtype=np.int64) for o in owned]


def partition_in_order(lengths: np.ndarray, world_size: int) -> list[np.ndarray]:
    """Split episode positions over ranks in order, contiguous blocks of near-equal frames (no shuffle)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    candidates = _candidates(lengths, world_size)
    sizes = lengths[candidates]
    middle = np.cumsum(sizes) - sizes / 2.0  # an episode goes to the rank its middle frame falls in
    starts = [0]
    for rank in range(1, world_size):
        first = int(np.searchsorted(middle, rank * sizes.sum() / world_size))
        starts.append(min(max(first, starts[-1] + 1), len(sizes) - (world_size - rank)))  # no rank empty
    starts.append(len(sizes))
    return [candidates[starts[r]:starts[r + 1]] for r in range(world_size)]


def partition_by_node(lengths: np.ndarray, stable: np.ndarray, world_size: int, ranks_per_node: int, seed: int,
                      epoch: int, *salt: int) -> list[np.ndarray]:
    """Split episode positions over ranks node by node (rank r on node r // ranks_per_node, as torchrun and SLURM
    number them): each node's share balanced by `stable` (the frames each episode may hand out in any epoch) and
    drawn from the seed and the node count alone, so it is the same every epoch; within a node, its episodes with
    frames left (`lengths`) split over its ranks by `partition_episodes` for this epoch."""
    from ..errors import ConfigError

    if ranks_per_node < 1 or world_size % ranks_per_node:
        raise ConfigError(f"partition='node' needs the same number of ranks on every node: world_size={world_size} "
                          f"is not a multiple of the ranks on this node ({ranks_per_node}, from LOCAL_WORLD_SIZE or "
                          "SLURM_TASKS_PER_NODE); launch as many ranks on each node, or use partition='rank'")
    lengths = np.asarray(lengths, dtype=np.int64)
    nodes = world_size // ranks_per_node
    shares = partition_episodes(np.asarray(stable, dtype=np.int64), nodes, seed, 0, salts.NODE)
    out: list[np.ndarray] = []
    for node, share in enumerate(shares):
        mine = np.zeros_like(lengths)
        mine[share] = lengths[share]
        if np.count_nonzero(mine) < ranks_per_node:
            raise ConfigError(f"partition='node': node {node} holds {np.count_nonzero(mine)} episodes with frames "
                              f"to draw, fewer than its {ranks_per_node} ranks; use partition='rank' or fewer ranks")
        out += partition_episodes(mine, ranks_per_node, seed, epoch, salts.NODE, node, *salt)
    return out


def partition_by_rank(lengths: np.ndarray, stable: np.ndarray, world_size: int, ranks_per_node: int, seed: int,
                      epoch: int, *salt: int) -> list[np.ndarray]:
    """`partition_episodes` over all ranks, afresh each epoch (the nodes play no part)."""
    return partition_episodes(lengths, world_size, seed, epoch, *salt)


PARTITIONS = {"rank": partition_by_rank, "node": partition_by_node}  # the `partition` setting's names
