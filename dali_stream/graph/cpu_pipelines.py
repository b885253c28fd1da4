"""Small DALI pipelines on the CPU that the workers run outside the graph (`graph.resizer`, `graph.dali_on_workers`):
made on first use, one per thread at a time, kept for reuse.

A process forked while it holds such pipelines (a torch DataLoader's workers started beside a loader) has none of
their threads: one shut down there, as garbage collection drops it, aborts the child ("terminate called after
throwing an instance of 'std::system_error'"). So in a forked child every pipeline made here is kept alive for the
child's life, never shut down, and the pools start empty (`_forked`)."""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator


class PipelinePool:
    """Pipelines `make()` builds, handed to one thread at a time (`take`); one that raised is dropped, not reused."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._free: list[Any] = []
        self._lock = threading.Lock()
        _POOLS.add(self)

    @contextmanager
    def take(self) -> Iterator[Any]:
        with self._lock:
            pipe = self._free.pop() if self._free else None
        if pipe is None:
            pipe = self._make()
            _MADE.add(pipe)
        yield pipe  # an exception leaves it out of the pool: a failed DALI pipeline is not run again
        with self._lock:
            self._free.append(pipe)

    def close(self) -> None:
        """Drop the idle pipelines."""
        with self._lock:
            self._free.clear()


_MADE: weakref.WeakSet = weakref.WeakSet()  # every pipeline the pools made in this process, alive
_POOLS: weakref.WeakSet = weakref.WeakSet()


def _forked() -> None:
    """In a forked child: each pipeline alive gets a reference nothing drops (it is never freed, so never shut down
    where its threads do not exist); the pools forget theirs and build new ones if used."""
    for pipe in list(_MADE):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(pipe))
    for pool in list(_POOLS):
        pool._free, pool._lock = [], threading.Lock()


os.register_at_fork(after_in_child=_forked)
