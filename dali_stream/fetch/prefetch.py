"""Prefetch on admit: pin each episode when the plan admits it to the pool, release it when retired.

The plan says, per batch, which episodes entered the pool and which drew their last frame
(`BatchPlan.admitted` / `retired`). While batches are built up to index *i*, `Prefetcher` has pinned every
episode admitted up to batch *i + ahead* (the store fetches a pinned episode in the background at once),
so a batch's episodes are normally fetched before it is built. An episode is unpinned once every batch up to
the one that retired it has been built; the store may then evict it. A run starting mid-epoch pins the
pool as it stands at that batch: episodes retired before it are never fetched.

Each batch's plan is drawn once (`loader.schedule.Plans`, handed in): the prefetcher draws it first, when its admissions come into view; the
run-ahead that cuts and builds the batch reads the same plan; the prefetcher releases it once the batch is built and
its retirements are read.
"""

from __future__ import annotations

import threading
from collections import Counter


class Prefetcher:
    def __init__(self, store, plans, start: int, ahead: int) -> None:
        self.store, self.plans, self.ahead = store, plans, max(0, ahead)
        self._lock = threading.Lock()
        self._next = start  # the next batch whose admissions get pinned
        self._low = start  # every batch before this one is built
        self._built: set[int] = set()
        self._held: Counter[int] = Counter()
        if start > 0:
            with plans.lock:
                live = plans.plan.pool_before(start)
            with self._lock:
                self._pin(live)

    def _pin(self, positions) -> None:
        for pos in positions:
            self._held[pos] += 1
        self.store.pin(list(positions))

    def _unpin(self, pos: int) -> None:
        if self._held[pos] > 0:
            self._held[pos] -= 1
            self.store.unpin(pos)

    def advance(self, index: int) -> None:
        """Batch `index` is about to be built: pin what batches up to `index + ahead` admit."""
        last = min(index + self.ahead, self.plans.plan.num_batches - 1)
        with self._lock:
            while self._next <= last:
                self._pin(self.plans(self._next).admitted)
                self._next += 1

    def built(self, index: int) -> None:
        """Batch `index` is built; release what retired in batches that are now all built."""
        with self._lock:
            self._built.add(index)
            while self._low in self._built:
                self._built.discard(self._low)
                for pos in self.plans(self._low).retired:
                    self._unpin(pos)
                self.plans.release(self._low)
                self._low += 1

    def close(self) -> None:
        """Release every pin this run still holds (an epoch that stopped early, the pool at its end)."""
        with self._lock:
            for pos, n in list(self._held.items()):
                for _ in range(n):
                    self._unpin(pos)
