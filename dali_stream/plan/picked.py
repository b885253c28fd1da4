"""Batches of samples the caller picks: map-style access (`loader.dataset[i]`, torch's DataLoader asking for a
batch of indices), planned as an epoch's batches are, so the loader's fetchers, decoders and builders serve them.

Sample i is the i-th frame of the selected episodes, episodes in the episodes table's order and frames in order
(with every episode selected, the frame whose `index` is i, as lerobot's `dataset[i]`). The samples asked for
together are cut into batches of at most `batch_size`, in the order asked; each batch admits and retires its own
episodes (nothing stays open between calls: the store keeps what fits its cache). Windows are the epoch plan's
(`EpochPlan.windows`: a mixture's members keep their own frame offsets). Each batch carries its sample numbers,
so the random numbers a sample gets (augmentation, image_transforms' seed) do not depend on the samples asked
beside it.

Pure: numpy only, as the rest of the planner.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .epoch import BatchPlan, EpochPlan


def locate_samples(lengths: np.ndarray, samples: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(episode position, frame in it) of each sample number (0 <= i < lengths.sum(), checked by the caller)."""
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
    asked = np.asarray(samples, dtype=np.int64)
    episodes = np.searchsorted(ends, asked, side="right")
    return episodes, asked - (ends[episodes] - np.asarray(lengths, dtype=np.int64)[episodes])


class PickedPlan:
    """The batches of `samples` (sample numbers, in the order asked), at most `batch_size` each, as the epoch run
    reads a plan: `num_batches`, `batch(i)`, `pool_before(i)`."""

    def __init__(self, plan: EpochPlan, samples: Sequence[int], batch_size: int) -> None:
        self.plan = plan
        self.samples = np.asarray(samples, dtype=np.int64)
        self.episodes, self.frames = locate_samples(plan.lengths, self.samples)
        self.batch_size = max(1, int(batch_size))
        self.num_batches = -(-len(self.samples) // self.batch_size)

    def __len__(self) -> int:
        return self.num_batches

    def batch(self, index: int) -> BatchPlan:
        if not 0 <= index < self.num_batches:
            raise IndexError(f"batch {index} is outside the {self.num_batches} batches of the samples asked for")
        part = slice(index * self.batch_size, (index + 1) * self.batch_size)
        episodes, frames = self.episodes[part], self.frames[part]
        opened = tuple(dict.fromkeys(episodes.tolist()))
        return BatchPlan(self.plan.epoch, index, episodes, frames, self.plan.windows(episodes, frames),
                         admitted=opened, retired=opened, samples=self.samples[part])

    def pool_before(self, index: int) -> list[int]:
        """Nothing stays open between batches."""
        return []
