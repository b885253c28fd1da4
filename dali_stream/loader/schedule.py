"""The run-ahead of one epoch: batches drawn, their long episodes' pieces cut, their episodes fetched and the
batches built ahead of the one handed over, by worker threads; the DALI graph's external source, or, without a
graph, `take(index)`."""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..decode.route import Route
from ..fetch.closer import in_background
from ..fetch.prefetch import Prefetcher
from ..graph.batches import BatchBuilder, Prepared
from ..plan.epoch import BatchPlan, EpochPlan


class Plans:
    """The batch plans of an epoch (`plan.epoch.EpochPlan`), each drawn once and kept until `release`: `plans(i)`
    is batch i's plan. Thread-safe (an EpochPlan draws lazily: one thread at a time, under `lock`)."""

    def __init__(self, plan) -> None:
        self.plan = plan
        self.lock = threading.Lock()
        self._drawn: dict[int, Any] = {}
        self.draws = 0  # batches drawn (each once)

    def __call__(self, index: int):
        with self.lock:
            got = self._drawn.get(index)
            if got is None:
                got = self._drawn[index] = self.plan.batch(index)
                self.draws += 1
            return got

    def release(self, index: int) -> None:
        """Batch `index` is built and its retirements read: nobody asks for its plan again."""
        with self.lock:
            self._drawn.pop(index, None)

    def __len__(self) -> int:
        """Plans kept now."""
        return len(self._drawn)


class Schedule:
    """Batches of an epoch prepared ahead by threads: the graph's external source (it hands DALI batch
    `start + k` for its k-th call), or, without a graph, `prepared(index)`. A graph with open-decoder engine
    cameras has a source per engine route too (`engine_source`): every source of an iteration hands out parts of
    the same prepared batch, whichever DALI calls first."""

    def __init__(self, builder: BatchBuilder, plan: EpochPlan, start: int, workers: int, lookahead: int,
                 fetch_ahead: int, cut_ahead: int = 0, finish=None) -> None:
        """Batches `lookahead` ahead are built; the pieces of long episodes of `max(lookahead, cut_ahead)` ahead
        are cut (a remote source's reads need more in flight than the builders do); what `lookahead +
        fetch_ahead` ahead admit is fetched. `finish(prepared, stop)`, where given, runs on each built batch in the
        thread that built it (`image_transforms` of host frames); `stop` is set when the schedule closes, and a wait
        of `finish` on other processes ends there (the close does not wait for the transform processes to start)."""
        self.builder, self.plan, self.start, self.finish = builder, plan, start, finish
        self.lookahead = lookahead
        self.cut_lookahead = min(max(lookahead, cut_ahead), lookahead + fetch_ahead)  # its episodes are pinned
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="dali-stream") if workers > 0 else None
        self.futures: dict[int, Future] = {}
        self.handed: deque[Prepared] = deque()
        self.plans = Plans(plan)  # each batch drawn once, read by the prefetcher, the cutting and the build
        self.prefetcher = Prefetcher(builder.store, self.plans, start, lookahead + fetch_ahead)
        self._next = start  # the next batch whose build begins
        self._cut = start  # the next batch to come into view: drawn once, its pieces cut ahead
        self.build_s = 0.0
        self.wait_s = 0.0  # time DALI's callback waited for a batch the workers had not finished
        self.owner = threading.current_thread()  # the iterating thread
        self.stop = threading.Event()  # set by `close`: nobody takes the batches being built
        self.sources = 1 + len(builder.engine_outputs)  # external sources per iteration
        self._taking: dict[int, tuple[Prepared, set[Route | None]]] = {}  # iteration -> batch, sources that took their part
        self._take_lock = threading.Lock()

    def _timed_build(self, plan: BatchPlan) -> Prepared:
        t0 = time.perf_counter()
        out = self.builder.build(plan)
        self.prefetcher.built(plan.index)
        if self.finish is not None:
            self.finish(out, self.stop)
        self.build_s += time.perf_counter() - t0
        return out

    def __call__(self, info) -> list[list[np.ndarray]]:
        return self._take(info.iteration, None)

    def engine_source(self, route: Route):
        """The external source of an open-decoder engine route's frames (`graph.pipeline`)."""
        return lambda info: self._take(info.iteration, route)

    def _take(self, iteration: int, part: Route | None) -> list[list[Any]]:
        """Source `part`'s outputs (None: the main source's, else an engine route's) of batch `start + iteration`."""
        with self._take_lock:
            entry = self._taking.get(iteration)
            if entry is None:
                index = self.start + iteration
                if index >= self.plan.num_batches:
                    raise StopIteration
                entry = self._taking[iteration] = (self.prepared(index), set())
                self.handed.append(entry[0])
            prepared, taken = entry
            taken.add(part)
            if len(taken) == self.sources:
                del self._taking[iteration]
        return prepared.engine_arrays[part] if part is not None else prepared.arrays

    def prepared(self, index: int) -> Prepared:
        """Batch `index`, built by the workers, which this call keeps `lookahead` batches ahead."""
        prepared = self.take(index)
        self.bring_ahead(index)
        return prepared

    def take(self, index: int) -> Prepared:
        """Batch `index` once built (built here without workers). Brings nothing else into view unless `index`
        itself is not in view yet: `bring_ahead` does, after the caller has what it needs (see `_host_batches`)."""
        t0 = time.perf_counter()
        if index >= self._next:
            self.bring_ahead(index)
        if self.pool is None:
            prepared = self._timed_build(self.plans(index))
        else:
            prepared = self.futures.pop(index).result()
        self.wait_s += time.perf_counter() - t0
        return prepared

    def bring_ahead(self, index: int) -> None:
        """Batches `index` to `index + cut_lookahead` come into view: each drawn once, the pieces of its long
        episodes cut ahead (`EpisodeStore.cut_ahead`); those to `index + lookahead` are built by the workers; what
        they admit is pinned for fetching."""
        self.prefetcher.advance(index)
        last = self.plan.num_batches
        for ahead in range(max(self._cut, index), min(index + self.cut_lookahead + 1, last)):
            plan = self.plans(ahead)
            self.builder.cut_ahead(plan)
            self._cut = ahead + 1
        for ahead in range(max(self._next, index), min(index + self.lookahead + 1, last)):
            if self.pool is not None:  # without workers `take` builds it
                self.futures[ahead] = self.pool.submit(self._timed_build, self.plans(ahead))
            self._next = ahead + 1

    def close(self) -> None:
        """End the workers and release the prefetcher's pins. Off the iterating thread (an abandoned iterator
        finalized by garbage collection, which can run on any thread: see `loader.stream`) this happens
        on a thread of its own, without waiting for the workers."""
        if threading.current_thread() is self.owner:
            self._close(True)
        else:
            in_background(self._close, False)

    def _close(self, wait: bool) -> None:
        self.stop.set()  # builds in progress give up their waits on the transform processes: their batches go unused
        if self.pool is not None:
            for fut in list(self.futures.values()):
                fut.cancel()
            self.pool.shutdown(wait=wait, cancel_futures=True)
        self.prefetcher.close()
        self.builder.store.drop_ahead()  # pieces of batches nobody will build (their builders, if any, cut their own)
