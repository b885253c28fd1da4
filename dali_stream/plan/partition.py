"""Episodes split over ranks (`EpochPlan`'s first step): balanced by frames in a seeded order, or in order, in
contiguous blocks, for an unshuffled pass. Pure functions of the lengths, the world size and the seed words."""

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
