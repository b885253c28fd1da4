"""How random a loader's batches are, against a shuffled DataLoader's over the same frames (`dali-stream bench`).

Three figures per run, computed from the plans (pure: nothing decoded), and the same three for the batches a
`DataLoader(shuffle=True)` (RandomSampler, or DistributedSampler's slice of one permutation per rank) would
draw from the same episodes:
- `distinct_frac`: distinct episodes in a batch / batch size (1.0: every sample from another episode);
- `touched_per_100`: episodes touched by 100 consecutive batches;
- `recent_frac`: share of a batch's episodes that were also in one of the previous `lookback` batches, with
  `lookback` = pool / batch (at least 1). A pool that rotates its lanes (the same episodes every few batches)
  scores near 1 here even when every batch holds distinct episodes; a shuffled DataLoader scores about
  1 - (1 - 1/episodes) ** (lookback * batch).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

BATCHES = 100
MAX_LOOKBACK = 1000  # batches: a global pool over 200k episodes would look back 3,000 batches of 64


def lookback(pool: int, batch_size: int) -> int:
    return max(1, min(MAX_LOOKBACK, math.ceil(pool / batch_size)))


def mixing(batches: Sequence[np.ndarray], back: int) -> dict[str, float]:
    """The three figures over `batches` (episode ids per batch); the first `back` serve only as history."""
    measured = batches[back:]
    distinct = [len(set(b.tolist())) / len(b) for b in measured]
    touched = len(set(np.concatenate(measured[:BATCHES]).tolist())) if len(measured) else 0
    recent = []
    for i in range(max(1, back), len(batches)):  # an epoch of one batch has no history to compare with
        mine = set(batches[i].tolist())
        before = set(np.concatenate(batches[i - back:i]).tolist())
        recent.append(len(mine & before) / len(mine))
    return {"distinct_frac": float(np.mean(distinct)) if distinct else float("nan"),
            "touched_per_100": touched * BATCHES / min(BATCHES, len(measured)) if len(measured) else 0.0,
            "recent_frac": float(np.mean(recent)) if recent else float("nan")}


def dataloader_batches(lengths: np.ndarray, batch_size: int, count: int, seed: int, rank: int = 0,
                       world_size: int = 1) -> list[np.ndarray]:
    """Episode ids of the first `count` batches a shuffled DataLoader draws over frames of `lengths` (a random
    permutation of every frame; with several ranks DistributedSampler's every world_size-th of it)."""
    episode_of = np.repeat(np.arange(len(lengths)), np.asarray(lengths, dtype=np.int64))
    order = np.random.default_rng(seed).permutation(len(episode_of))[rank::world_size]
    count = min(count, len(order) // batch_size)
    return [episode_of[order[i * batch_size:(i + 1) * batch_size]] for i in range(count)]


def compare(plan_batch: Callable[[int], np.ndarray], num_batches: int, lengths: np.ndarray, pool: int,
            batch_size: int, seed: int, rank: int = 0, world_size: int = 1) -> dict[str, object]:
    """The loader's figures (`plan_batch(i)`: episode positions of batch i of epoch 0) beside a shuffled
    DataLoader's on the same episodes, both over `lookback(pool)` + 100 batches where the epoch has them."""
    back = lookback(pool, batch_size)
    count = min(num_batches, back + BATCHES)
    back = min(back, max(0, count - 1))
    ours = [np.asarray(plan_batch(i)) for i in range(count)]
    theirs = dataloader_batches(lengths, batch_size, count, seed, rank, world_size)
    return {"lookback_batches": back, "loader": mixing(ours, back),
            "shuffled_dataloader": mixing(theirs, min(back, max(0, len(theirs) - 1)))}
