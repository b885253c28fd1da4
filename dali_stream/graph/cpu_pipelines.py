"""Small DALI pipelines on the CPU that the workers run outside the graph (`graph.resizer`, `graph.dali_frames`):
made on first use, one per thread at a time, kept for reuse."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator


class PipelinePool:
    """Pipelines `make()` builds, handed to one thread at a time (`take`); one that raised is dropped, not reused."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._free: list[Any] = []
        self._lock = threading.Lock()

    @contextmanager
    def take(self) -> Iterator[Any]:
        with self._lock:
            pipe = self._free.pop() if self._free else None
        if pipe is None:
            pipe = self._make()
        yield pipe  # an exception leaves it out of the pool: a failed DALI pipeline is not run again
        with self._lock:
            self._free.append(pipe)

    def close(self) -> None:
        """Drop the idle pipelines."""
        with self._lock:
            self._free.clear()
